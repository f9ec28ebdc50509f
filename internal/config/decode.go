package config

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// decoder walks a YAML node tree against the Config struct's yaml tags,
// decoding the keys cairn implements and reporting every other key with its
// full dotted path. It decodes leaf by leaf (rather than handing the tree to
// yaml.Decode) so that every error names its key, and so that a driver
// section given with no value still selects its driver.
type decoder struct {
	file     string // file name for messages; "" when parsing bytes
	env      string // the variable a document came from; "" for a file
	warnings []string
}

var durationType = reflect.TypeFor[time.Duration]()

// field describes one key of a struct.
type field struct {
	index  int
	kind   fieldKind
	driver bool   // one of the struct's mutually exclusive driver sections
	why    string // for refused keys: what ignoring it would do
}

type fieldKind int

const (
	implemented fieldKind = iota
	notYetKind
	refusedKind
	obsoleteKind
)

// fieldsOf maps the yaml key names of struct type t to its fields, including
// the blank marker fields that name unimplemented keys.
func fieldsOf(t reflect.Type) map[string]field {
	fields := make(map[string]field, t.NumField())
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		f := field{index: i, driver: sf.Tag.Get("cairn") == "driver", why: sf.Tag.Get("why")}
		switch sf.Type {
		case reflect.TypeFor[notYet]():
			f.kind = notYetKind
		case reflect.TypeFor[refused]():
			f.kind = refusedKind
		case reflect.TypeFor[obsolete]():
			f.kind = obsoleteKind
		default:
			if !sf.IsExported() {
				continue
			}
		}
		if name == "" {
			name = strings.ToLower(sf.Name)
		}
		fields[name] = f
	}
	return fields
}

// supportedDrivers lists the driver keys of a struct that cairn implements.
func supportedDrivers(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Tag.Get("cairn") == "driver" && sf.Type.Kind() == reflect.Pointer {
			name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
			names = append(names, name)
		}
	}
	return names
}

// driversSet names the driver sections present in struct value v, in
// declaration order.
func driversSet(v reflect.Value) []string {
	var names []string
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Tag.Get("cairn") == "driver" && sf.Type.Kind() == reflect.Pointer && !v.Field(i).IsNil() {
			name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
			names = append(names, name)
		}
	}
	return names
}

// document decodes YAML text into c.
func (d *decoder) document(data []byte, c *Config) error {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		name := d.file
		if name == "" {
			name = "document"
		}
		return fmt.Errorf("%s: %s", name, oneLine(err))
	}
	return d.root(&root, c)
}

// root decodes a whole document tree into c.
func (d *decoder) root(n *yaml.Node, c *Config) error {
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		n = n.Content[0]
	}
	n = resolve(n)
	if n.Kind == 0 || isNull(n) {
		return nil // an empty document: all defaults
	}
	if n.Kind != yaml.MappingNode {
		return d.errorf(n, "", "the configuration must be a mapping of keys, not %s", describe(n))
	}
	d.rewriteDeprecated(n)
	return d.value(n, reflect.ValueOf(c).Elem(), "")
}

// rewriteDeprecated reads distribution's deprecated top-level "loglevel" as
// log.level, which wins when both are given.
func (d *decoder) rewriteDeprecated(m *yaml.Node) {
	i := keyIndex(m, "loglevel")
	if i < 0 {
		return
	}
	key, val := m.Content[i], m.Content[i+1]
	logIdx := keyIndex(m, "log")
	var logMap *yaml.Node
	if logIdx >= 0 {
		logMap = resolve(m.Content[logIdx+1])
		if !isNull(logMap) && logMap.Kind != yaml.MappingNode {
			return // decoding reports the malformed log section
		}
		if logMap.Kind == yaml.MappingNode && keyIndex(logMap, "level") >= 0 {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			d.warnf(key, "loglevel is deprecated and log.level is also given; loglevel ignored")
			return
		}
	}
	m.Content = append(m.Content[:i], m.Content[i+2:]...)
	levelKey := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "level", Line: key.Line}
	switch {
	case logIdx < 0:
		m.Content = append(m.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "log", Line: key.Line},
			&yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: key.Line, Content: []*yaml.Node{levelKey, val}})
	case logMap.Kind == yaml.MappingNode:
		// Copy so that a mapping shared through an anchor is left alone.
		merged := *logMap
		merged.Content = append(append([]*yaml.Node(nil), logMap.Content...), levelKey, val)
		// The log key moved: find it again after removing loglevel.
		m.Content[keyIndex(m, "log")+1] = &merged
	default: // log: with no value
		m.Content[keyIndex(m, "log")+1] = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: key.Line, Content: []*yaml.Node{levelKey, val}}
	}
	d.warnf(key, "loglevel is deprecated; read as log.level")
}

// value decodes n into v, the field at the dotted path.
func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) error {
	n = resolve(n)
	if isNull(n) {
		d.null(n, v, path)
		return nil
	}
	if v.Type() == durationType {
		return d.duration(n, v, path)
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(newWithDefaults(v.Type().Elem()))
		}
		return d.value(n, v.Elem(), path)
	case reflect.Struct:
		return d.structure(n, v, path)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return d.errorf(n, path, "expected a mapping, not %s", describe(n))
		}
		return d.decodeAny(n, v, path)
	case reflect.Slice:
		if v.Type().Elem().Kind() != reflect.Struct {
			return d.decodeAny(n, v, path)
		}
		// Lists of sections (health checks) are decoded key by key, so
		// that their unknown keys are reported too.
		if n.Kind != yaml.SequenceNode {
			return d.errorf(n, path, "expected a list, not %s", describe(n))
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			elem := s.Index(i)
			elem.Set(newWithDefaults(v.Type().Elem()).Elem())
			if err := d.value(item, elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		v.Set(s)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			return d.errorf(n, path, "expected a string, not %s", describe(n))
		}
		v.SetString(n.Value)
	case reflect.Bool:
		var b bool
		if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
			return d.errorf(n, path, "%s is not a boolean (true or false)", describe(n))
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n.Kind != yaml.ScalarNode {
			return d.errorf(n, path, "%s is not an integer", describe(n))
		}
		var i int64
		var err error
		switch n.ShortTag() {
		case "!!int":
			err = n.Decode(&i)
		case "!!str": // distribution accepts numbers written as strings
			i, err = strconv.ParseInt(n.Value, 0, 64)
		default:
			err = errors.New("not an integer")
		}
		if err != nil || v.OverflowInt(i) {
			return d.errorf(n, path, "%s is not an integer", describe(n))
		}
		v.SetInt(i)
	default:
		return d.decodeAny(n, v, path)
	}
	return nil
}

// decodeAny hands kinds with no keys of their own (lists of strings, maps)
// to yaml; the key is named on failure.
func (d *decoder) decodeAny(n *yaml.Node, v reflect.Value, path string) error {
	if err := n.Decode(v.Addr().Interface()); err != nil {
		return d.errorf(n, path, "%s", oneLine(err))
	}
	return nil
}

// null handles a key given with no value: a section that is a pointer (a
// driver) is selected with its defaults; anything else keeps its default.
func (d *decoder) null(n *yaml.Node, v reflect.Value, path string) {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(newWithDefaults(v.Type().Elem()))
		}
		return
	}
	if d.env != "" && path != "" {
		d.warnf(n, "empty value for %s; ignored", path)
	}
}

func (d *decoder) duration(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.ScalarNode {
		return d.errorf(n, path, "%s is not a duration", describe(n))
	}
	if tag := n.ShortTag(); tag == "!!int" || tag == "!!float" {
		return d.errorf(n, path, "%s has no unit; write a duration such as 168h or 30m", n.Value)
	}
	dur, err := time.ParseDuration(n.Value)
	if err != nil {
		return d.errorf(n, path, "%q is not a duration such as 168h or 30m", n.Value)
	}
	v.SetInt(int64(dur))
	return nil
}

// structure decodes mapping n into struct v.
func (d *decoder) structure(n *yaml.Node, v reflect.Value, path string) error {
	fields := fieldsOf(v.Type())
	drivers := supportedDrivers(v.Type())
	// A section whose unknown keys must stop start-up says why.
	strict, _ := v.Addr().Interface().(interface{ unknownKey() string })
	if n.Kind == yaml.ScalarNode && len(drivers) > 0 {
		return d.driverShortForm(n, v, path, fields, drivers)
	}
	if n.Kind != yaml.MappingNode {
		return d.errorf(n, path, "expected a mapping of keys, not %s", describe(n))
	}

	// Merge keys ("<<: *anchor") first, so that the mapping's own keys win.
	for i := 0; i < len(n.Content); i += 2 {
		if isMerge(n.Content[i]) {
			for _, src := range mergeSources(n.Content[i+1]) {
				if err := d.structure(src, v, path); err != nil {
					return err
				}
			}
		}
	}

	lines := make(map[string]int)
	var named []string
	for i := 0; i < len(n.Content); i += 2 {
		k := n.Content[i]
		if isMerge(k) {
			continue
		}
		if line, dup := lines[k.Value]; dup {
			return d.errorf(k, join(path, k.Value), "given twice (lines %d and %d)", line, k.Line)
		}
		lines[k.Value] = k.Line
		if f, ok := fields[k.Value]; ok && f.driver {
			named = append(named, k.Value)
		}
	}
	if len(named) > 1 {
		return d.errorf(n, path, "more than one storage driver (%s); give exactly one", strings.Join(named, ", "))
	}
	if len(named) == 1 {
		if y, ok := v.Addr().Interface().(interface{ yieldDefaultDriver(string) }); ok {
			y.yieldDefaultDriver(named[0])
		}
	}

	for i := 0; i < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if isMerge(k) {
			continue
		}
		p := join(path, k.Value)
		f, ok := fields[k.Value]
		switch {
		case !ok && len(drivers) > 0:
			// distribution takes every other key here for a driver name.
			return d.errorf(k, p, "unknown storage driver (cairn supports %s)%s", strings.Join(drivers, ", "), didYouMean(k.Value, slices.Collect(maps.Keys(fields))))
		case !ok && strict != nil:
			return d.errorf(k, p, "%s%s", strict.unknownKey(), didYouMean(k.Value, slices.Collect(maps.Keys(fields))))
		case !ok:
			if err := d.unknown(k, p, path, fields); err != nil {
				return err
			}
		case f.kind == notYetKind:
			d.warnf(k, "%s is not supported yet; ignored", p)
		case f.kind == obsoleteKind:
			d.warnf(k, "%s is obsolete (current distribution ignores it too); ignored", p)
		case f.kind == refusedKind:
			return d.errorf(k, p, "refused: %s", f.why)
		default:
			if err := d.value(val, v.Field(f.index), p); err != nil {
				return err
			}
		}
	}
	return nil
}

// unknown handles a key the section does not have. In a file it stops
// loading, naming the nearest valid key: ignoring a misspelt key runs the
// registry on a default the operator did not choose (storage.filesystem.rootdir
// for rootdirectory moved the store). Two exceptions warn instead, as
// distribution ignores them: REGISTRY_* variables, since unrelated ones
// share the prefix (Kubernetes sets REGISTRY_PORT, REGISTRY_HTTP_PORT for
// services so named); and top-level keys that misspell no section, which
// may hold YAML anchors for the rest of the file.
func (d *decoder) unknown(k *yaml.Node, p, path string, fields map[string]field) error {
	near := nearest(k.Value, slices.Collect(maps.Keys(fields)))
	switch {
	case d.env != "" && near != "":
		d.warnf(k, "unknown key %s (did you mean %s?); ignored", p, near)
	case d.env != "" || (path == "" && near == ""):
		d.warnf(k, "unknown key %s; ignored", p)
	case near != "":
		return d.errorf(k, p, "unknown key; did you mean %s?", near)
	default:
		return d.errorf(k, p, "unknown key")
	}
	return nil
}

// driverShortForm decodes distribution's "storage: inmemory": that driver
// with its default parameters, replacing any driver already selected.
func (d *decoder) driverShortForm(n *yaml.Node, v reflect.Value, path string, fields map[string]field, drivers []string) error {
	f, ok := fields[n.Value]
	if !ok || !f.driver {
		return d.errorf(n, path, "%q is not a storage driver (cairn supports %s)", n.Value, strings.Join(drivers, ", "))
	}
	if f.kind == refusedKind {
		return d.errorf(n, path, "refused: %s", f.why)
	}
	if y, ok := v.Addr().Interface().(interface{ yieldDefaultDriver(string) }); ok {
		y.yieldDefaultDriver(n.Value)
	}
	for _, other := range fields {
		if other.driver && v.Field(other.index).Kind() == reflect.Pointer {
			fv := v.Field(other.index)
			fv.Set(reflect.Zero(fv.Type()))
		}
	}
	fv := v.Field(f.index)
	fv.Set(newWithDefaults(fv.Type().Elem()))
	return nil
}

// newWithDefaults returns a pointer to a new t with its section defaults.
func newWithDefaults(t reflect.Type) reflect.Value {
	p := reflect.New(t)
	if s, ok := p.Interface().(interface{ setDefaults() }); ok {
		s.setDefaults()
	}
	return p
}

func (d *decoder) where(n *yaml.Node) string {
	switch {
	case d.env != "" || n.Line == 0:
		return ""
	case d.file != "":
		return fmt.Sprintf(" (%s:%d)", d.file, n.Line)
	default:
		return fmt.Sprintf(" (line %d)", n.Line)
	}
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...) + d.where(n)
	if path != "" {
		msg = path + ": " + msg
	}
	return errors.New(msg)
}

func (d *decoder) warnf(n *yaml.Node, format string, args ...any) {
	msg := fmt.Sprintf(format, args...) + d.where(n)
	if d.env != "" {
		msg = d.env + ": " + msg
	}
	d.warnings = append(d.warnings, msg)
}

func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge"
}

// mergeSources returns the mappings a merge key's value names: one mapping
// or a list of them.
func mergeSources(n *yaml.Node) []*yaml.Node {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		return []*yaml.Node{n}
	}
	srcs := make([]*yaml.Node, 0, len(n.Content))
	for _, c := range n.Content {
		srcs = append(srcs, resolve(c))
	}
	return srcs
}

// keyIndex returns the index in m.Content of key name, or -1.
func keyIndex(m *yaml.Node, name string) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == name && !isMerge(m.Content[i]) {
			return i
		}
	}
	return -1
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return strconv.Quote(n.Value)
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// oneLine flattens yaml's multi-line errors so start-up fails with one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}
