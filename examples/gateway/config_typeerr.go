package gateway

import (
	"errors"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// typeErrLine matches a line of yaml.v3's type error: "line 4: cannot unmarshal !!str
// `abc` into float64" (a value over 10 bytes is cut to its first 7 and "..."; a list or
// a map is named by its tag alone).
var typeErrLine = regexp.MustCompile("^line (\\d+): (cannot unmarshal !!\\w+(?: `(.*)`)? into .+)$")

// nameTypeErrors makes the lines of a yaml.v3 type error (a value of the wrong type: a
// word where a number goes, a list where a map goes) name the key each is about, as the
// other config errors do: "line 4: timeouts.read_body_seconds: cannot unmarshal !!str
// `abc` into float64" instead of the same without the key (newuser47). It places a line
// by its line number and value among data's nodes, in document order; one it cannot
// place is kept as yaml.v3 wrote it. It returns err unchanged when err is not a
// *yaml.TypeError, else a plain error whose text is the rewritten lines. Cost: one
// decoding of data as nodes, on this error only.
func nameTypeErrors(data []byte, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		return err
	}
	type entry struct {
		line        int
		value, path string
	}
	var entries []entry // every value under a key or in a list, in document order
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := joinKey(path, n.Content[i].Value)
				entries = append(entries, entry{n.Content[i+1].Line, n.Content[i+1].Value, p})
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := path + "[" + strconv.Itoa(i) + "]"
				entries = append(entries, entry{c.Line, c.Value, p})
				walk(c, p)
			}
		}
	}
	walk(&doc, "")
	lines := make([]string, len(te.Errors))
	for i, l := range te.Errors {
		lines[i] = l
		m := typeErrLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		line, _ := strconv.Atoi(m[1])
		shown, cut := strings.CutSuffix(m[3], "...")
		for _, e := range entries {
			if e.line == line && (e.value == m[3] || cut && strings.HasPrefix(e.value, shown)) {
				lines[i] = "line " + m[1] + ": " + e.path + ": " + m[2]
				break
			}
		}
	}
	return errors.New(strings.Join(lines, "; "))
}
