package config

import (
	"bytes"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// masked replaces a secret's value in Effective's output.
const masked = "********"

// Effective renders c as YAML with distribution's keys: every section with
// the values cairn runs with, defaults included, so an operator sees what
// a typo or a missing key would have meant. Secrets (passwords, secret and
// account keys, tokens, inline credentials, Authorization headers, the
// password of a URL) are masked, so the output can be pasted into a ticket;
// unset strings, numbers, lists and sections are left out.
func (c *Config) Effective() ([]byte, error) {
	n := effectiveNode(reflect.ValueOf(c).Elem(), "")
	if n == nil {
		n = &yaml.Node{Kind: yaml.MappingNode}
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2) // as distribution's examples are written
	if err := enc.Encode(n); err != nil {
		return nil, fmt.Errorf("config: render: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: render: %w", err)
	}
	return b.Bytes(), nil
}

// isSecret reports whether the value of key must not be shown.
func isSecret(key string) bool {
	k := strings.ToLower(key)
	for _, s := range []string{"password", "secret", "token", "authorization", "accountkey", "private_key", "apikey", "api_key"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return k == "credentials"
}

// effectiveNode renders v, the value of key; nil leaves it out.
func effectiveNode(v reflect.Value, key string) *yaml.Node {
	if v.Type() == durationType {
		return scalar(time.Duration(v.Int()).String(), "!!str", key)
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return effectiveNode(v.Elem(), key)
	case reflect.Struct:
		m := &yaml.Node{Kind: yaml.MappingNode}
		t := v.Type()
		for i := range t.NumField() {
			sf := t.Field(i)
			name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
			if !sf.IsExported() || name == "-" {
				continue
			}
			if name == "" {
				name = strings.ToLower(sf.Name)
			}
			fv := v.Field(i)
			// A zero number or duration means "unset" in these sections
			// (the consumer's default, GOMAXPROCS, no limit); printed, it
			// would read as the value in force. One given through a
			// pointer (proxy.ttl: 0) was written and is shown.
			if k := fv.Kind(); fv.IsZero() && (k >= reflect.Int && k <= reflect.Float64) {
				continue
			}
			val := effectiveNode(fv, name)
			// An empty section says nothing, except a driver's, which
			// selects it ("inmemory: {}").
			if val != nil && val.Kind == yaml.MappingNode && len(val.Content) == 0 && sf.Type.Kind() != reflect.Pointer {
				continue
			}
			if val != nil {
				m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name}, val)
			}
		}
		return m
	case reflect.Map:
		if v.Len() == 0 {
			return nil
		}
		m := &yaml.Node{Kind: yaml.MappingNode}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		for _, k := range keys {
			name := fmt.Sprint(k)
			val := effectiveNode(v.MapIndex(k), name)
			if val == nil {
				val = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
			}
			m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name}, val)
		}
		return m
	case reflect.Slice, reflect.Array:
		if v.Len() == 0 {
			return nil
		}
		if v.Type().Elem().Kind() == reflect.Uint8 { // gcs's inline credentials
			return scalar(string(v.Bytes()), "!!str", key)
		}
		s := &yaml.Node{Kind: yaml.SequenceNode}
		for i := range v.Len() {
			item := effectiveNode(v.Index(i), key)
			if item == nil {
				item = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
			}
			s.Content = append(s.Content, item)
		}
		return s
	case reflect.String:
		if v.Len() == 0 {
			return nil
		}
		return scalar(v.String(), "!!str", key)
	case reflect.Bool:
		return scalar(strconv.FormatBool(v.Bool()), "!!bool", key)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return scalar(strconv.FormatInt(v.Int(), 10), "!!int", key)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return scalar(strconv.FormatUint(v.Uint(), 10), "!!int", key)
	case reflect.Float32, reflect.Float64:
		return scalar(strconv.FormatFloat(v.Float(), 'g', -1, 64), "!!float", key)
	default:
		return scalar(fmt.Sprint(v.Interface()), "!!str", key)
	}
}

// scalar is a leaf value of key, masked when key names a secret or the
// value is a URL carrying a password.
func scalar(value, tag, key string) *yaml.Node {
	switch {
	case isSecret(key) && value != "":
		value, tag = masked, "!!str"
	case tag == "!!str" && strings.Contains(value, "://"):
		if u, err := url.Parse(value); err == nil {
			value = u.Redacted() // the password becomes xxxxx
		}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
}
