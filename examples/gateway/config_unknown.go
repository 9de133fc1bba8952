package gateway

import (
	"reflect"
	"regexp"
	"strings"

	"github.com/agentserve/sessionaffinity/affinity"
)

// yaml.v3's unknown-key message names the Go type that has no such field ("field
// wieght not found in type gateway.BackendConfig"); unknownKeyText rewrites each into the
// key's place in the YAML ("unknown key "wieght" in backends[]"), which is what the
// reader of the config sees. A type it cannot place keeps yaml.v3's wording.

// configSections maps each struct type of Config (and of affinity.Config) to the YAML
// path where it appears: "" for Config itself, "health", "backends[]", "affinity.load",
// "affinity.tiers.<name>" ... Several paths are joined with " or ". Built by reflection on each call: only an
// error message needs it.
func configSections() map[string]string {
	paths := map[string][]string{}
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			switch t.Kind() {
			case reflect.Slice:
				path += "[]"
			case reflect.Map:
				path += ".<name>"
			}
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t.PkgPath() == "" {
			return
		}
		name := t.String()
		for _, p := range paths[name] {
			if p == path {
				return
			}
		}
		paths[name] = append(paths[name], path)
		for i := range t.NumField() {
			f := t.Field(i)
			key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if key == "" || key == "-" || !f.IsExported() {
				continue
			}
			sub := key
			if path != "" {
				sub = path + "." + key
			}
			walk(f.Type, sub)
		}
	}
	walk(reflect.TypeFor[Config](), "")
	// affinity.Config decodes through an unexported shadow type of its own: its keys sit
	// directly under affinity.
	walk(reflect.TypeFor[affinity.Config](), "affinity")
	out := make(map[string]string, len(paths))
	for name, ps := range paths {
		out[name] = strings.Join(ps, " or ")
	}
	out["affinity.config"] = "affinity"
	return out
}

// unknownKeyText rewrites yaml.v3's unknown-field messages in msg (see unknownFieldRE).
func unknownKeyText(msg string) string {
	sections := configSections()
	re := regexp.MustCompile(`field (\S+) not found in type (\S+)`)
	return re.ReplaceAllStringFunc(msg, func(m string) string {
		sub := re.FindStringSubmatch(m)
		path, ok := sections[sub[2]]
		switch {
		case !ok:
			return m
		case path == "":
			return `unknown key "` + sub[1] + `" at the top level`
		}
		return `unknown key "` + sub[1] + `" in ` + path
	})
}

// unknownKeyError is yaml.v3's error with unknownKeyText's wording; Unwrap gives the
// original.
type unknownKeyError struct{ err error }

func (e *unknownKeyError) Error() string { return unknownKeyText(e.err.Error()) }
func (e *unknownKeyError) Unwrap() error { return e.err }
