package gateway

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Whole numbers in integer keys.
//
// yaml.v3 decodes a number with a fractional part into an integer field by truncation,
// without a word: max_body_bytes: 10.9 became 10, health.success_threshold: 0.5 became 0
// (the default). ParseConfig therefore walks the YAML document beside the typed Config and
// refuses, naming the key and the line, a !!float value that is not a whole number in any
// integer-typed field (max_body_bytes, limits.*, health.failure_threshold and
// success_threshold, outlier_detection's counts and percent, store.db, and any integer key
// added later). A whole float (1e3, 10.0) is accepted as the integer it equals, as yaml.v3
// decodes it. The affinity section checks its own integer keys (affinity.Config's
// UnmarshalYAML) and is skipped here; the *_seconds keys are floats and stay fractional.

// sectionErrors maps a top-level key to the sentinel of its errors (see Config.Validate);
// a key not listed gets ErrConfigSyntax.
var sectionErrors = map[string]error{
	"max_body_bytes":    ErrMaxBodyBytes,
	"limits":            ErrLimitsConfig,
	"health":            ErrHealthConfig,
	"outlier_detection": ErrOutlierConfig,
	"store":             ErrStoreConfig,
}

// yamlUnmarshalers are the interfaces through which a type decodes itself: its integer
// fields are its own business.
var yamlUnmarshalers = []reflect.Type{
	reflect.TypeFor[yaml.Unmarshaler](),
	reflect.TypeFor[interface{ UnmarshalYAML(func(any) error) error }](),
}

// checkWholeNumbers reports the first integer-typed key of Config whose value in doc (the
// decoded YAML document) is a number with a fractional part, as a configError naming the
// key path and line. Cost: one walk of the document.
func checkWholeNumbers(doc *yaml.Node) error {
	if doc == nil {
		return nil
	}
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil
		}
		doc = doc.Content[0]
	}
	return walkWholeNumbers(doc, reflect.TypeFor[Config](), "")
}

func walkWholeNumbers(n *yaml.Node, t reflect.Type, path string) error {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	for _, u := range yamlUnmarshalers {
		if t.Implements(u) || reflect.PointerTo(t).Implements(u) {
			return nil
		}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return walkWholeNumbers(n, t.Elem(), path)
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return nil // the typed decoding reports it
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			if ft, ok := fields[key]; ok {
				if err := walkWholeNumbers(n.Content[i+1], ft, joinKey(path, key)); err != nil {
					return err
				}
			}
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return nil
		}
		for i, e := range n.Content {
			if err := walkWholeNumbers(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := walkWholeNumbers(n.Content[i+1], t.Elem(), fmt.Sprintf("%s[%q]", path, n.Content[i].Value)); err != nil {
				return err
			}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!float" {
			return nil
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f == math.Trunc(f) {
			return nil // not a finite number (the typed decoding refuses it) or whole
		}
		top, _, _ := strings.Cut(path, ".")
		kind, ok := sectionErrors[top]
		if !ok {
			kind = ErrConfigSyntax
		}
		return invalid(kind, "line %d: %s: %s is not a whole number", n.Line, path, n.Value)
	}
	return nil
}

// yamlFields maps the YAML keys of struct type t to their field types, descending into
// `yaml:",inline"` fields.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	m := make(map[string]reflect.Type, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if strings.Contains(","+opts+",", ",inline,") && f.Type.Kind() == reflect.Struct {
			for k, v := range yamlFields(f.Type) {
				m[k] = v
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		m[name] = f.Type
	}
	return m
}

func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
