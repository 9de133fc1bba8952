package gateway

import (
	"bytes"
)

// maxHeldEvent bounds the bytes of an unfinished event the usage filter holds between
// backend reads (and half the caller's buffer bounds it too); a longer event is
// forwarded as it comes, unchecked. The usage-only chunk is a few hundred bytes.
const maxHeldEvent = 4096

// usageDrop is the state of the filter that takes the usage-only event out of an event
// stream whose usage the gateway asked for (stream_usage: see streamusage.go). The
// stream is cut into events at blank lines; each complete event is forwarded or dropped
// whole; the bytes of the event still incomplete at the end of a read are held.
type usageDrop struct {
	on      bool   // filter the stream
	held    []byte // the start of the current event, not yet forwarded
	content bool   // the current line has bytes other than its end
	cr      bool   // the last byte seen was a CR that ended a line
	endCR   bool   // ... and that line was blank: an event ended on it
	dropLF  bool   // ... and that event was dropped: an LF right after the CR goes with it
	over    bool   // the current event outgrew maxHeldEvent: forwarded as it comes
	lines   int    // lines with content the current event has had so far
}

// readDropping is leaseBody.Read with the filter on: it reads the backend into p after
// the held bytes, feeds what came to the usage scan, and returns the kept bytes, reading
// again while a read completes no kept byte. At the end of the stream (any error) the
// held bytes go out as they are, with the error.
func (b *leaseBody) readDropping(p []byte) (int, error) {
	d := &b.drop
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if len(d.held) > len(p)/2 { // no room to read after it: forward it as it is
			n := copy(p, d.held)
			d.held, d.over = d.held[:copy(d.held, d.held[n:])], true
			return n, nil
		}
		h := copy(p, d.held)
		n, err := b.ReadCloser.Read(p[h:])
		if n > 0 {
			b.scan(p[h : h+n])
		}
		w := d.filter(p[:h+n], h)
		if err != nil {
			w += copy(p[w:], d.held) // an event the stream left unfinished
			d.held = d.held[:0]
			return w, err
		}
		if w > 0 {
			return w, nil
		}
	}
}

// filter scans buf[from:] (buf[:from] is the held start of the current event, scanned
// already), moves the bytes of the events it keeps, in order, to buf[:w] and keeps the
// incomplete event at the end in d.held (or, over maxHeldEvent, forwards it too). Lines
// end with LF, CRLF or CR.
func (d *usageDrop) filter(buf []byte, from int) (w int) {
	ev := 0 // start of the current event
	for i := from; i < len(buf); {
		t := i + bytes.IndexByte(buf[i:], '\n')
		if t < i {
			t = len(buf)
		}
		if k := bytes.IndexByte(buf[i:t], '\r'); k >= 0 {
			t = i + k
		}
		if t > i { // bytes of the line
			d.content, d.cr = true, false
		}
		if t == len(buf) {
			break
		}
		c := buf[t]
		i = t + 1
		if c == '\n' && d.cr { // the LF of a CRLF
			d.cr = false
			if d.endCR { // the CR ended an event: the LF goes (or is dropped) with it
				if !d.dropLF {
					buf[w] = '\n'
					w++
				}
				ev = i
			}
			continue
		}
		d.cr, d.endCR, d.dropLF = c == '\r', false, false
		if d.content { // a line ended
			d.content = false
			d.lines++
			continue
		}
		// A blank line: the event ends at i. One line: the event is that line and the
		// ends of it and of the blank line.
		keep := d.over || d.lines != 1 || !usageOnlyLine(bytes.TrimRight(buf[ev:i], "\r\n"))
		if keep {
			w += copy(buf[w:], buf[ev:i])
		}
		d.over, d.endCR, d.dropLF, d.lines = false, c == '\r', c == '\r' && !keep, 0
		ev = i
	}
	if d.over || len(buf)-ev > maxHeldEvent {
		d.over = true
		w += copy(buf[w:], buf[ev:])
		d.held = d.held[:0]
		return w
	}
	d.held = append(d.held[:0], buf[ev:]...)
	return w
}

// usageOnlyLine reports whether line, the one line of an event (without its end), is
// the usage-only chunk of an OpenAI-style stream: a "data:" line whose JSON is an object
// with "choices" [] and a "usage" that is not null (the last of duplicate keys). Cost: a
// search for "usage" in the line, and a scan of it when found; 0 allocs.
func usageOnlyLine(line []byte) bool {
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok || !bytes.Contains(data, []byte(`"usage"`)) {
		return false
	}
	data = bytes.TrimPrefix(data, []byte(" "))
	top, obj, _ := scanJSON(data)
	if !obj || top.usage == nil || string(top.usage) == "null" {
		return false
	}
	ch, found := member(data, top.open, "choices")
	return found && len(ch) >= 2 && ch[0] == '[' && ch[skipWS(ch, 1)] == ']'
}
