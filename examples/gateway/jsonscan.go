package gateway

import (
	"bytes"
	"encoding/binary"
)

// One pass over a JSON document: it is validated exactly as encoding/json's json.Valid
// validates it (RFC 8259 grammar; strings are not checked for valid UTF-8, as json.Valid
// does not; at most maxJSONDepth nested objects and arrays, json.Valid's bound), and
// when its top-level value is an object the members the gateway reads are located on
// the way: "model", "stream" and "stream_options" (requests), "usage" and
// "x_agent_serve" (responses). This replaces a
// json.Valid pass followed by scans of the keys; encoding/json's validator steps a state
// machine through a function call per byte, this one skips the bytes inside strings (most
// of a chat body) eight at a time. FuzzScanJSON checks it against json.Valid and member.

// maxJSONDepth is encoding/json's nesting bound (its maxNestingDepth): json.Valid
// rejects a document with more nested objects and arrays.
const maxJSONDepth = 10000

// topMembers is what scanJSON found at the top level of a JSON object: the raw value of
// the last "model", "usage", "stream" and "stream_options" member (nil when absent),
// whether an "x_agent_serve" member exists, and where the object closes. Keys are compared after unescaping (like member). The last of
// duplicate keys wins, as in encoding/json (json.Unmarshal) and
// Python's json (vLLM): a body {"model":"x","model":"big"} is routed as "big", the model
// the backend serves.
type topMembers struct {
	open  int    // index of the object's '{'
	model []byte // raw value of the last top-level "model", nil if none
	usage []byte // raw value of the last top-level "usage", nil if none
	meta  bool   // a top-level MetadataKey member exists

	stream       []byte // raw value of the last top-level "stream", nil if none
	streamOpts   []byte // raw value of the last top-level "stream_options", nil if none
	streamOptsAt int    // index of streamOpts in the document
	close        int    // index of the object's closing '}'
}

// Keys scanJSON records, by index.
const (
	keyOther = iota
	keyModel
	keyUsage
	keyMeta
	keyStream
	keyStreamOpts
)

// topKey classifies a top-level key by its raw (still escaped) bytes.
func topKey(raw []byte) int {
	if bytes.IndexByte(raw, '\\') >= 0 { // rare: decode, then compare
		switch {
		case keyIs(raw, "model"):
			return keyModel
		case keyIs(raw, "usage"):
			return keyUsage
		case keyIs(raw, MetadataKey):
			return keyMeta
		case keyIs(raw, "stream"):
			return keyStream
		case keyIs(raw, "stream_options"):
			return keyStreamOpts
		}
		return keyOther
	}
	switch string(raw) {
	case "model":
		return keyModel
	case "usage":
		return keyUsage
	case MetadataKey:
		return keyMeta
	case "stream":
		return keyStream
	case "stream_options":
		return keyStreamOpts
	}
	return keyOther
}

// scanJSON validates b like json.Valid and reports whether it is valid JSON whose
// top-level value is an object (obj) — then with its members of interest in top.
// valid is json.Valid(b). Cost: one pass over b, 0 allocations below 512 levels of
// nesting (a rare escaped top-level key allocates in keyIs).
func scanJSON(b []byte) (top topMembers, obj, valid bool) {
	var small [8]uint64
	kinds := small[:] // bit d set: the container at depth d+1 is an object
	depth := 0        // containers open
	inObj := false    // the innermost open container is an object
	i := skipWS(b, 0)
	obj = i < len(b) && b[i] == '{'
	top.open = i
	key, valStart := keyOther, 0 // the current top-level member
	for {
		// A value starts at i.
		if i >= len(b) {
			return top, false, false
		}
		switch c := b[i]; c {
		case '{', '[':
			if depth == maxJSONDepth {
				return top, false, false
			}
			i = skipWS(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' or ']': empty, a complete value
				if depth == 0 {
					top.close = i
				}
				i++
				break
			}
			if depth/64 == len(kinds) {
				kinds = append(kinds, 0)
			}
			inObj = c == '{'
			if inObj {
				kinds[depth/64] |= 1 << (uint(depth) % 64)
			} else {
				kinds[depth/64] &^= 1 << (uint(depth) % 64)
			}
			depth++
			if c == '[' {
				continue // the first element
			}
			var ok bool
			if i, key, ok = scanKey(b, i, depth, key); !ok {
				return top, false, false
			}
			if depth == 1 {
				valStart = i
			}
			continue
		case '"':
			var ok bool
			if i, ok = scanString(b, i); !ok {
				return top, false, false
			}
		case 't':
			if !hasLiteral(b, i, "true") {
				return top, false, false
			}
			i += 4
		case 'f':
			if !hasLiteral(b, i, "false") {
				return top, false, false
			}
			i += 5
		case 'n':
			if !hasLiteral(b, i, "null") {
				return top, false, false
			}
			i += 4
		default:
			var ok bool
			if i, ok = scanNumber(b, i); !ok {
				return top, false, false
			}
		}
		// A value ended at i: close containers until a ',' starts the next value.
		for {
			if depth == 1 && obj { // the value of a top-level member ended
				switch key {
				case keyModel: // the last wins (encoding/json, Python's json)
					top.model = b[valStart:i]
				case keyUsage:
					top.usage = b[valStart:i]
				case keyMeta:
					top.meta = true
				case keyStream:
					top.stream = b[valStart:i]
				case keyStreamOpts:
					top.streamOpts, top.streamOptsAt = b[valStart:i], valStart
				}
				key = keyOther
			}
			i = skipWS(b, i)
			if depth == 0 {
				if i != len(b) {
					return top, false, false
				}
				return top, obj, true
			}
			if i >= len(b) {
				return top, false, false
			}
			if b[i] == ',' {
				i = skipWS(b, i+1)
				if inObj {
					var ok bool
					if i, key, ok = scanKey(b, i, depth, key); !ok {
						return top, false, false
					}
					if depth == 1 {
						valStart = i
					}
				}
				break
			}
			if (inObj && b[i] != '}') || (!inObj && b[i] != ']') {
				return top, false, false
			}
			i++
			if depth--; depth > 0 {
				inObj = kinds[(depth-1)/64]&(1<<(uint(depth-1)%64)) != 0
			} else {
				top.close = i - 1
			}
		}
	}
}

// scanKey reads an object key and its ':' at b[i] and returns the index of the value
// (whitespace skipped). At depth 1 the key is classified (topKey); below, key is
// returned as given.
func scanKey(b []byte, i, depth, key int) (int, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return i, key, false
	}
	end, ok := scanString(b, i)
	if !ok {
		return i, key, false
	}
	if depth == 1 {
		key = topKey(b[i+1 : end-1])
	}
	i = skipWS(b, end)
	if i >= len(b) || b[i] != ':' {
		return i, key, false
	}
	return skipWS(b, i+1), key, true
}

// Masks of the SWAR string scan: a byte of a word below 0x20, or equal to '"' or '\\'.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plainWord reports whether none of the 8 bytes of w ends or escapes a string: all are
// >= 0x20 and none is '"' or '\\' (the classic "has a zero/less-than byte" bit tricks).
func plainWord(w uint64) bool {
	lt := (w - ones*0x20) &^ w
	q := w ^ (ones * '"')
	bs := w ^ (ones * '\\')
	return ((lt | (q-ones)&^q | (bs-ones)&^bs) & highs) == 0
}

// scanString returns the index just past the JSON string at b[i] == '"' and whether it
// is valid (no raw control character, valid escapes).
func scanString(b []byte, i int) (int, bool) {
	i++
	for {
		for i+8 <= len(b) && plainWord(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= len(b) {
			return i, false
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c == '\\':
			if i+1 >= len(b) {
				return i, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return i, false
				}
				i += 6
			default:
				return i, false
			}
		case c < 0x20:
			return i, false
		default:
			i++
		}
	}
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// scanNumber returns the index just past the JSON number at b[i]:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		if i++; i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		if i++; i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	}
	return i, true
}

// hasLiteral reports whether b holds lit at i.
func hasLiteral(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}
