package config

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// envPrefix starts every configuration variable, as in distribution.
const envPrefix = "REGISTRY_"

// ApplyEnv applies the REGISTRY_* variables of environ ("NAME=value"
// entries, as os.Environ returns) to c, then fills defaults and validates.
// REGISTRY_A_B_C=v sets key a.b.c to v read as YAML, exactly as distribution
// does; variables are applied in lexical order, so REGISTRY_STORAGE=inmemory
// (which switches driver) comes before REGISTRY_STORAGE_... parameters.
// Variables naming no key are warnings, not errors, since unrelated ones
// share the prefix (Kubernetes sets REGISTRY_PORT for a service "registry").
// On error c may be partly updated.
func ApplyEnv(c *Config, environ []string) ([]string, error) {
	type envVar struct{ name, value string }
	var vars []envVar
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, envPrefix) {
			vars = append(vars, envVar{name, value})
		}
	}
	slices.SortFunc(vars, func(a, b envVar) int { return strings.Compare(a.name, b.name) })

	var warnings []string
	for _, ev := range vars {
		d := decoder{env: ev.name}
		doc, ok, err := envDocument(ev.name, ev.value)
		switch {
		case err != nil:
			return warnings, fmt.Errorf("config: %s: %w", ev.name, err)
		case !ok:
			warnings = append(warnings, ev.name+": not a configuration key; ignored")
			continue
		}
		err = d.root(doc, c)
		warnings = append(warnings, d.warnings...)
		if err != nil {
			return warnings, fmt.Errorf("config: %s: %w", ev.name, err)
		}
	}
	c.finish()
	return warnings, c.Validate()
}

// envDocument turns REGISTRY_A_B=value into the document {a: {b: value}};
// ok is false when the name has an empty segment.
func envDocument(name, value string) (doc *yaml.Node, ok bool, err error) {
	segs := strings.Split(strings.ToLower(strings.TrimPrefix(name, envPrefix)), "_")
	if slices.Contains(segs, "") {
		return nil, false, nil
	}
	var parsed yaml.Node
	if err := yaml.Unmarshal([]byte(value), &parsed); err != nil {
		return nil, false, fmt.Errorf("value is not valid YAML: %s", oneLine(err))
	}
	node := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
	if parsed.Kind == yaml.DocumentNode && len(parsed.Content) == 1 {
		node = parsed.Content[0]
	}
	for i := len(segs) - 1; i >= 0; i-- {
		key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: segs[i]}
		node = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{key, node}}
	}
	return node, true, nil
}
