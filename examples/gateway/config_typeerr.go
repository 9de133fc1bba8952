package gateway

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/agentserve/sessionaffinity/affinity"
)

// typeErrLine matches a line of yaml.v3's type error: "line 4: cannot unmarshal !!str
// `abc` into float64" (a value over 10 bytes is cut to its first 7 and "..."; a list or a
// map is named by its tag alone; the line is that of the value's node, an anchor's for an
// alias).
var typeErrLine = regexp.MustCompile("^line (\\d+): (cannot unmarshal (!!\\w+)(?: `(.*)`)? into (.+))$")

// maxTypedValues bounds the walk of nameTypeErrors (aliases can multiply a document's
// values; yaml.v3 refuses excessive aliasing itself, this keeps the walk cheap anyway).
const maxTypedValues = 1 << 20

// typedSpot is what a yaml.v3 type error says of a value: its node's line, tag, value as
// the message shows it, and the Go type it was decoded into.
type typedSpot struct {
	line       int
	tag, shown string
	into       string
}

// nameTypeErrors makes the lines of a yaml.v3 type error (a value of the wrong type: a
// word where a number goes, a list where a map goes) name the key each is about, as the
// other config errors do, and say what it takes: "line 4: timeouts.read_body_seconds:
// cannot unmarshal !!str `abc` into float64 (want a number of seconds)" instead of the
// same without the key (newuser47) and the hint (tester51). It walks data's
// nodes beside Config's types, as the decoding did (aliases resolved, merge keys `<<`
// merged, so a value reached twice is listed twice), and gives each error line the next
// value, in document order, with the same line, tag, shown value and Go type (tester49:
// matching the line and value alone named the wrong key when another key on that line had
// the same value, an alias, or a list). A line it cannot place keeps yaml.v3's wording.
// It returns err unchanged when err is not a *yaml.TypeError, else a plain error whose
// text is the rewritten lines joined by "; " (the first 20, then "(+N more)"). Cost: one decoding of data as nodes and one
// walk, on this error only; O(1) per error line.
func nameTypeErrors(data []byte, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return err
	}
	w := typedWalk{paths: map[typedSpot][]string{}}
	w.walk(doc.Content[0], reflect.TypeFor[Config](), "")
	lines := make([]string, len(te.Errors))
	for i, l := range te.Errors {
		lines[i] = l
		m := typeErrLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		line, _ := strconv.Atoi(m[1])
		spot := typedSpot{line: line, tag: m[3], shown: m[4], into: m[5]}
		if q := w.paths[spot]; len(q) > 0 {
			lines[i] = "line " + m[1] + ": " + q[0] + ": " + m[2] + " (want " + wanted(q[0], m[5]) + ")"
			w.paths[spot] = q[1:]
		}
	}
	if len(lines) > maxTypeErrLines {
		lines = append(lines[:maxTypeErrLines], fmt.Sprintf("(+%d more)", len(te.Errors)-maxTypeErrLines))
	}
	return errors.New(strings.Join(lines, "; "))
}

// wanted says in words what the key at path takes, from the Go type yaml.v3 named
// (tester51: "into float64" alone did not say that "5s" should be 5).
func wanted(path, goType string) string {
	switch {
	case strings.HasPrefix(goType, "float"):
		if strings.HasSuffix(path, "_seconds") {
			return "a number of seconds"
		}
		return "a number"
	case strings.HasPrefix(goType, "int") || strings.HasPrefix(goType, "uint"):
		if strings.HasSuffix(path, "_seconds") {
			return "a whole number of seconds"
		}
		return "a whole number"
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "true or false"
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	}
	return "a map" // map[...] and structs
}

// maxTypeErrLines is how many wrong-type lines a config error lists before "(+N more)"
// (tester49: 20,000 bad values made a 1.2 MB message).
const maxTypeErrLines = 20

// affinityConfigType is walked although it decodes itself: affinity.Config.UnmarshalYAML
// checks its integers, then decodes the same fields plainly, whose type errors are
// yaml.v3's own (wrapped) and name no key either.
var affinityConfigType = reflect.TypeFor[affinity.Config]()

// typedWalk lists, by typedSpot, the key paths of a document's values in document order.
type typedWalk struct {
	paths map[typedSpot][]string
	n     int
}

func (w *typedWalk) walk(n *yaml.Node, t reflect.Type, path string) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if w.n++; w.n > maxTypedValues {
		return
	}
	for _, u := range yamlUnmarshalers {
		if t != affinityConfigType && (t.Implements(u) || reflect.PointerTo(t).Implements(u)) {
			return // decodes itself, with errors of its own
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	shown := ""
	if n.Kind == yaml.ScalarNode { // as yaml.v3 shows it
		if shown = n.Value; len(shown) > 10 {
			shown = shown[:7] + "..."
		}
	}
	spot := typedSpot{line: n.Line, tag: n.ShortTag(), shown: shown, into: t.String()}
	w.paths[spot] = append(w.paths[spot], path)
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		w.fields(n, yamlFields(t), path)
	case (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && n.Kind == yaml.SequenceNode:
		for i, e := range n.Content {
			w.walk(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			w.walk(n.Content[i+1], t.Elem(), fmt.Sprintf("%s[%q]", path, n.Content[i].Value))
		}
	}
}

// fields walks the pairs of mapping n as the fields of a struct at path, merging the
// mappings a `<<` key names (one, or a list of them) into it.
func (w *typedWalk) fields(n *yaml.Node, fields map[string]reflect.Type, path string) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == "<<" && k.ShortTag() == "!!merge" {
			for v.Kind == yaml.AliasNode && v.Alias != nil {
				v = v.Alias
			}
			merged := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				merged = v.Content
			}
			for _, m := range merged {
				for m.Kind == yaml.AliasNode && m.Alias != nil {
					m = m.Alias
				}
				if m.Kind == yaml.MappingNode {
					w.fields(m, fields, path)
				}
			}
			continue
		}
		if ft, ok := fields[k.Value]; ok {
			w.walk(v, ft, joinKey(path, k.Value))
		}
	}
}
