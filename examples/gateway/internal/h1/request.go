package h1

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// checkRequest does the checks net/http's server does after parsing that
// http.ReadRequest does not; it returns "" or the answer's reason.
func checkRequest(req *http.Request, scan *headerScan, h2Preface bool) string {
	if req.ProtoMajor != 1 && (req.ProtoMajor != 2 || req.ProtoMinor != 0 || req.Method != "PRI" || req.RequestURI != "*") {
		return "505 HTTP Version Not Supported: unsupported protocol version"
	}
	if req.ProtoAtLeast(1, 1) && scan.hosts == 0 && !h2Preface && req.Method != "CONNECT" {
		return "missing required Host header"
	}
	if scan.hosts == 1 && !httpguts.ValidHostHeader(scan.host()) {
		return "malformed Host header"
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return "invalid header name"
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return "invalid header value"
			}
		}
	}
	return ""
}

// isH2Preface reports the "PRI * HTTP/2.0" preface without header fields (Host
// aside: the caller checks it), which net/http hands to the handler.
func isH2Preface(r *http.Request) bool {
	return r.Method == "PRI" && len(r.Header) == 0 && r.URL.Path == "*" && r.Proto == "HTTP/2.0"
}

// headerScan finds the Host header lines in a request's raw header as it is read
// (http.ReadRequest removes them from the Header): their count and the first's value;
// and it counts the Content-Length lines, which http.ReadRequest also removes when the
// body is chunked, and the Transfer-Encoding lines, which it removes (and ignores) on
// HTTP/1.0: a request with both, or an HTTP/1.0 one with Transfer-Encoding, is
// answered, then its connection closed (RFC 9112 section 6.1).
type headerScan struct {
	done     bool
	prevHost bool // the line before was the first Host line (or its continuation)
	hosts    int
	lengths  int  // Content-Length lines
	encs     int  // Transfer-Encoding lines
	line     int  // bytes of the current line, CR excluded
	match    int  // bytes of "host:" matched at the line's start; -1: not a Host line
	clMatch  int  // bytes of "content-length:" matched at the line's start; -1: not one
	teMatch  int  // bytes of "transfer-encoding:" matched at the line's start; -1: not one
	inValue  bool // in a Host line's value
	value    []byte
}

func (s *headerScan) reset() {
	s.done, s.prevHost, s.hosts, s.lengths, s.encs, s.line, s.match, s.clMatch, s.teMatch, s.inValue = false, false, 0, 0, 0, 0, 0, 0, 0, false
	s.value = s.value[:0]
}

// host is the first Host line's value as textproto makes it: trimmed, and joined with
// its continuation lines (obs-fold) by single spaces.
func (s *headerScan) host() string {
	var parts []string
	for part := range strings.SplitSeq(string(s.value), "\n") {
		if part = strings.Trim(part, " \t"); part != "" {
			parts = append(parts, part)
		}
	}
	return strings.Join(parts, " ")
}

func (s *headerScan) feed(p []byte) {
	const name, clName, teName = "host:", "content-length:", "transfer-encoding:"
	for _, b := range p {
		if s.done {
			return
		}
		switch {
		case b == '\n':
			if s.line == 0 {
				s.done = true // the blank line ending the header
				return
			}
			s.prevHost = s.inValue && s.hosts == 1
			s.line, s.match, s.clMatch, s.teMatch, s.inValue = 0, 0, 0, 0, false
			continue
		case b == '\r':
			continue
		case s.line == 0 && (b == ' ' || b == '\t') && s.prevHost:
			s.inValue = true // a continuation of the first Host line: part of its value
			s.value = append(s.value, '\n')
			s.line++
			continue
		}
		if s.line == 0 {
			s.prevHost = false
		}
		if !s.inValue {
			s.lengths += matchName(&s.clMatch, clName, b)
			s.encs += matchName(&s.teMatch, teName, b)
		}
		if s.inValue {
			if s.hosts == 1 {
				s.value = append(s.value, b)
			}
		} else if s.match >= 0 {
			if s.match < len(name) && lower(b) == name[s.match] {
				s.match++
				if s.match == len(name) {
					s.hosts++
					s.inValue = true
				}
			} else {
				s.match = -1
			}
		}
		s.line++
	}
}

// matchName advances *m, the bytes of name matched at a line's start (-1: no match),
// by b; it returns 1 when b completes name.
func matchName(m *int, name string, b byte) int {
	if *m < 0 {
		return 0
	}
	if *m < len(name) && lower(b) == name[*m] {
		*m++
		if *m == len(name) {
			*m = -1
			return 1
		}
		return 0
	}
	*m = -1
	return 0
}

func lower(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

func numLeadingCRorLF(v []byte) (n int) {
	for _, b := range v {
		if b == '\r' || b == '\n' {
			n++
			continue
		}
		break
	}
	return
}

// isUnsupportedTE reports http.ReadRequest's unsupported Transfer-Encoding error
// (its type is net/http's own).
func isUnsupportedTE(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "unsupported transfer encoding") || strings.HasPrefix(s, "too many transfer encodings")
}

// isCommonNetReadError is net/http's: a request not read because the connection
// ended, timed out or failed; no answer is written.
func isCommonNetReadError(err error) bool {
	if err == io.EOF {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "read"
}

func expectsContinue(r *http.Request) bool {
	return hasToken(r.Header.Get("Expect"), "100-continue")
}

func wants10KeepAlive(r *http.Request) bool {
	if r.ProtoMajor != 1 || r.ProtoMinor != 0 {
		return false
	}
	return hasToken(r.Header.Get("Connection"), "keep-alive")
}

// hasToken reports whether v, a comma-separated list, holds token (case-insensitive).
func hasToken(v, token string) bool {
	for v != "" {
		var f string
		f, v, _ = strings.Cut(v, ",")
		if strings.EqualFold(strings.Trim(f, " \t"), token) {
			return true
		}
	}
	return false
}
