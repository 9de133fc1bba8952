package h1_test

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// confCase is one row of the differential table. Every case compares the whole
// reduced answer (see describe and exchange: per answer the status, and for a
// handler's answer the protocol, framing, headers but Date, body and trailers; then
// whether the connection closes or serves a next request); what says in words what
// the case is about. Where h1 differs from net/http on purpose, h1 holds h1's
// documented answer (the lines exchange produces; "=" is net/http's line, a line
// ending in "*" matches by its prefix) and why says why, citing h1's package doc.
type confCase struct {
	name string
	what string
	x    confExchange
	h1   []string
	why  string
}

const (
	host   = "Host: example.com\r\n"
	get    = "GET / HTTP/1.1\r\n" + host + "\r\n"
	kib300 = 300 << 10
)

func req(method, target string, headers ...string) string {
	return method + " " + target + " HTTP/1.1\r\n" + host + strings.Join(headers, "") + "\r\n"
}

func one(s string) confExchange { return confExchange{writes: []string{s}} }

// confCases is the table; cases that want a small MaxHeaderBytes read confMaxHeader.
var confCases = []confCase{
	// Keep-alive, pipelining, versions.
	{name: "get", what: "a plain GET, then the connection serves the probe", x: one(get)},
	{name: "keepalive-sequence", what: "three requests, each sent after the previous answer",
		x: confExchange{writes: []string{get, req("GET", "/flush"), req("POST", "/", "Content-Length: 3\r\n") + "abc"}, finals: 3}},
	{name: "pipelined-3", what: "three requests in one write, answered in order",
		x: confExchange{writes: []string{get + req("GET", "/flush") + req("POST", "/x", "Content-Length: 2\r\n") + "hi"}, finals: 3}},
	{name: "pipelined-after-unread-body", what: "a small unread body is discarded and the pipelined request served",
		x: confExchange{writes: []string{req("POST", "/noread", "Content-Length: 5\r\n") + "hello" + get}, finals: 2}},
	{name: "http10", what: "HTTP/1.0 without keep-alive: answered then closed",
		x: one("GET / HTTP/1.0\r\n\r\n")},
	{name: "http10-keepalive", what: "HTTP/1.0 with Connection: keep-alive: Content-Length, Connection: keep-alive, kept open",
		x: one("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")},
	{name: "http10-keepalive-flush", what: "HTTP/1.0 keep-alive with a flushing handler: close-delimited",
		x: one("GET /flush HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")},
	{name: "http10-host", what: "HTTP/1.0 with a Host header", x: one("GET / HTTP/1.0\r\nHost: a\r\n\r\n")},
	{name: "client-close", what: "Connection: close from the client", x: one(req("GET", "/", "Connection: close\r\n"))},
	{name: "client-close-mixed-case", what: "Connection: Keep-Alive, CLOSE", x: one(req("GET", "/", "Connection: Keep-Alive, CLOSE\r\n"))},

	// Response framing and bodies.
	{name: "head", what: "HEAD: headers as for GET (computed Content-Length), no body",
		x: confExchange{writes: []string{req("HEAD", "/html")}, methods: []string{"HEAD"}}},
	{name: "head-empty", what: "HEAD on a handler that writes nothing",
		x: confExchange{writes: []string{req("HEAD", "/empty")}, methods: []string{"HEAD"}}},
	{name: "head-flush", what: "HEAD on a flushing handler",
		x: confExchange{writes: []string{req("HEAD", "/flush")}, methods: []string{"HEAD"}}},
	{name: "204", what: "204: no body, no framing headers, the write refused", x: one(req("GET", "/204"))},
	{name: "304", what: "304: no body", x: one(req("GET", "/304"))},
	{name: "flush-chunked", what: "a handler that flushes: chunked", x: one(req("GET", "/flush"))},
	{name: "no-flush-length", what: "a handler that does not flush: Content-Length computed, Content-Type sniffed", x: one(req("GET", "/html"))},
	{name: "big-no-flush", what: "64 KB without a flush: more than the buffer, chunked", x: one(req("GET", "/big"))},
	{name: "empty", what: "a handler that writes nothing: Content-Length: 0", x: one(req("GET", "/empty"))},
	{name: "set-content-length", what: "Content-Length set by the handler is kept", x: one(req("GET", "/setcl"))},
	{name: "trailers", what: "declared Trailer and a TrailerPrefix key: chunked with both trailers", x: one(req("GET", "/trailer"))},
	{name: "trailers-http10", what: "trailers on HTTP/1.0: no chunking, no trailers",
		x: one("GET /trailer HTTP/1.0\r\n\r\n")},
	{name: "early-hints", what: "103 with the current headers, then the 200", x: one(req("GET", "/early"))},
	{name: "response-header-injection", what: "CR/LF in a response header and trailer value: no header or trailer injected",
		x: one(req("GET", "/inject"))},
	{name: "response-bad-header-name", what: "a response header name with a space", x: one(req("GET", "/inject-name"))},
	{name: "response-cl-invalid", what: "the handler sets Content-Length: abc", x: one(req("GET", "/cl-invalid"))},
	{name: "response-te-and-cl", what: "the handler sets Transfer-Encoding: chunked and a Content-Length", x: one(req("GET", "/te-set"))},
	{name: "double-writeheader", what: "a second WriteHeader is ignored", x: one(req("GET", "/double-writeheader"))},
	{name: "head-handler-cl", what: "HEAD, the handler sets Content-Length and writes nothing",
		x: confExchange{writes: []string{req("HEAD", "/head-cl")}, methods: []string{"HEAD"}}},
	{name: "handler-keepalive-header", what: "the handler sets Connection: keep-alive on HTTP/1.1", x: one(req("GET", "/keepalive-header"))},
	{name: "handler-keepalive-header-http10", what: "the handler sets Connection: keep-alive on an HTTP/1.0 request without it",
		x: one("GET /keepalive-header HTTP/1.0\r\n\r\n")},
	{name: "body-partial-read-small", what: "the handler reads 10 of 1000 body bytes: the rest discarded, the next request served",
		x: confExchange{writes: []string{req("POST", "/read-partial", "Content-Length: 1000\r\n") + strings.Repeat("p", 1000) + get}, finals: 2}},
	{name: "body-partial-read-large", what: "the handler reads 10 of 300 KB: Connection: close",
		x: one(req("POST", "/read-partial", "Content-Length: 307200\r\n") + strings.Repeat("p", kib300))},
	{name: "http10-post-keepalive", what: "HTTP/1.0 POST with a body and keep-alive, then the probe",
		x: one("POST / HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nabc")},
	{name: "expect-continue-close", what: "Expect: 100-continue with Connection: close",
		x: confExchange{writes: []string{req("POST", "/", "Expect: 100-continue\r\nConnection: close\r\nContent-Length: 4\r\n"), "data"}}},
	{name: "early-hints-after-content-length", what: "a 103 after the handler set Content-Length: not sent on the 103",
		x: one(req("GET", "/early-cl"))},
	{name: "early-hints-then-continue", what: "Expect: 100-continue, a 103, then the body read: 103, 100, 200",
		x: confExchange{writes: []string{req("POST", "/early-then-read", "Expect: 100-continue\r\nContent-Length: 4\r\n"), "data"}}},
	{name: "manual-continue", what: "the handler writes 100 itself under Expect: 100-continue: one 100",
		x: confExchange{writes: []string{req("POST", "/manual-100", "Expect: 100-continue\r\nContent-Length: 4\r\n"), "data"}}},
	{name: "manual-continue-no-expect", what: "the handler writes 100 without Expect", x: one(req("GET", "/manual-100"))},
	{name: "trailers-with-content-length", what: "declared trailers and a Content-Length", x: one(req("GET", "/trailer-cl"))},
	{name: "expect-continue-case", what: "Expect: 100-CONTINUE (case-insensitive)",
		x: confExchange{writes: []string{req("POST", "/", "Expect: 100-CONTINUE\r\nContent-Length: 4\r\n"), "data"}}},
	{name: "expect-continue-zero-length", what: "Expect: 100-continue with Content-Length: 0: no 100",
		x: one(req("POST", "/", "Expect: 100-continue\r\nContent-Length: 0\r\n"))},
	{name: "body-read-after-flush", what: "the handler reads the body after flushing the header (no full duplex)",
		x: one(req("POST", "/flush-then-read", "Content-Length: 4\r\n") + "data")},
	{name: "body-read-full-duplex", what: "EnableFullDuplex, flush, then the body read",
		x: one(req("POST", "/duplex", "Content-Length: 4\r\n") + "data")},
	{name: "body-read-past-deadline", what: "a past read deadline set by the handler, then the body read (the body not sent yet)",
		x: confExchange{writes: []string{req("POST", "/read-deadline", "Content-Length: 4\r\n"), "data"}}},
	{name: "write-deadline", what: "SetWriteDeadline works", x: one(req("GET", "/write-deadline"))},
	{name: "handler-close", what: "the handler sets Connection: close: answered then closed", x: one(req("GET", "/close"))},
	{name: "cl-over", what: "the handler writes more than its Content-Length: the excess refused", x: one(req("GET", "/cl-over"))},
	{name: "cl-under", what: "the handler writes less than its Content-Length: the connection closes", x: one(req("GET", "/cl-under"))},
	{name: "writeheader-bad-code", what: "WriteHeader(1000): net/http panics (no answer, closed)",
		x:   one(req("GET", "/status-bad")),
		h1:  []string{`HTTP/1.1 500 *`, "*"},
		why: "h1 doc: WriteHeader with a code outside 100-999 is logged and answered 500"},
	{name: "panic", what: "a handler panic: no answer, connection closed", x: one(req("GET", "/panic"))},
	{name: "panic-abort", what: "panic(http.ErrAbortHandler): no answer, connection closed", x: one(req("GET", "/abort"))},
	{name: "panic-after-flush", what: "a panic after a flushed chunk: the chunked body is cut", x: one(req("GET", "/panic-after-flush"))},

	// Request bodies.
	{name: "body-length", what: "a Content-Length body", x: one(req("POST", "/", "Content-Length: 5\r\n") + "hello")},
	{name: "body-chunked", what: "a chunked body",
		x: one(req("POST", "/", "Transfer-Encoding: chunked\r\n") + "5\r\nhello\r\n0\r\n\r\n")},
	{name: "body-chunked-ext-trailers", what: "chunk extensions and request trailers",
		x: one(req("POST", "/", "Transfer-Encoding: chunked\r\nTrailer: X-Tr\r\n") + "5;ext=1;q=\"a\"\r\nhello\r\n0\r\nX-Tr: v\r\n\r\n")},
	{name: "body-chunked-undeclared-trailer", what: "a request trailer not declared in a Trailer header reaches r.Trailer",
		x: one(req("POST", "/", "Transfer-Encoding: chunked\r\n") + "3\r\nabc\r\n0\r\nX-Tr: v\r\n\r\n")},
	{name: "body-unread-large", what: "an unread body over 256 KB: answered with Connection: close, the next request not served",
		x: one(req("POST", "/noread", "Content-Length: 307200\r\n") + strings.Repeat("b", kib300) + get)},
	{name: "body-unread-small-chunked", what: "a small unread chunked body is discarded; the next request is served",
		x: confExchange{writes: []string{req("POST", "/noread", "Transfer-Encoding: chunked\r\n") + "3\r\nabc\r\n0\r\n\r\n" + get}, finals: 2}},
	{name: "maxbytes-over", what: "http.MaxBytesReader over its limit: the handler's 413, then closed",
		x: one(req("POST", "/maxbytes", "Content-Length: 20\r\n") + strings.Repeat("m", 20)),
		h1: []string{
			`HTTP/1.1 413 framing=length=9 Content-Type="text/plain; charset=utf-8" Date=set X-Handler="1" body="too large"`,
			"probe: served",
		},
		why: "h1 doc, Not done: MaxBytesReader's connection close is net/http's own hook (an unexported " +
			"method); the bytes left are discarded like any unread body under 256 KiB and the connection " +
			"kept (the gateway closes it itself, h1srv brief item 4)"},
	{name: "maxbytes-over-large", what: "http.MaxBytesReader over its limit with more than 256 KB left: 413, Connection: close",
		x: one(req("POST", "/maxbytes", "Content-Length: 307200\r\n") + strings.Repeat("m", kib300))},
	{name: "maxbytes-fits", what: "http.MaxBytesReader within its limit",
		x: one(req("POST", "/maxbytes", "Content-Length: 4\r\n") + "four")},
	{name: "expect-continue-read", what: "Expect: 100-continue, body sent after the 100: 100 then 200",
		x: confExchange{writes: []string{req("POST", "/", "Expect: 100-continue\r\nContent-Length: 4\r\n"), "data"}}},
	{name: "expect-continue-eager", what: "Expect: 100-continue with the body in the same write",
		x: one(req("POST", "/", "Expect: 100-continue\r\nContent-Length: 4\r\n") + "data")},
	{name: "expect-continue-noread", what: "Expect: 100-continue, the handler does not read: no 100, answered with " +
		"Connection: close; the client then sends its body anyway (as a client does when its wait for the 100 ends) and the server closes",
		x: confExchange{writes: []string{req("POST", "/noread", "Expect: 100-continue\r\nContent-Length: 4\r\n"), "data"}}},
	{name: "expect-continue-http10", what: "Expect: 100-continue on HTTP/1.0: no 100",
		x: one("POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\ndata")},
	{name: "expect-other", what: "an Expect other than 100-continue: 417",
		x: one(req("POST", "/", "Expect: something\r\nContent-Length: 4\r\n") + "data")},

	// Smuggling and request-line shapes.
	{name: "cl-and-te", what: "Content-Length and Transfer-Encoding: chunked together: framed by the chunks",
		x:   one(req("POST", "/", "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n") + "5\r\nhello\r\n0\r\n\r\n"),
		h1:  []string{"=", "after close: closed"},
		why: "h1 doc: answered as net/http answers it, then the connection is closed (RFC 9112 section 6.1); net/http keeps it open"},
	{name: "cl-and-te-pipelined", what: "Content-Length and Transfer-Encoding, then a pipelined request",
		x:   one(req("POST", "/", "Transfer-Encoding: chunked\r\ncontent-length:  4\r\n") + "5\r\nhello\r\n0\r\n\r\n" + get),
		h1:  []string{"=", "after close: closed"},
		why: "h1 doc: the request after one with both framing headers is not served (RFC 9112 section 6.1)"},
	{name: "two-cl-differ", what: "two Content-Length values that differ: 400",
		x: one(req("POST", "/", "Content-Length: 3\r\nContent-Length: 4\r\n") + "abcd")},
	{name: "cl-plus-sign", what: "Content-Length: +3: 400", x: one(req("POST", "/", "Content-Length: +3\r\n") + "abc")},
	{name: "cl-negative", what: "Content-Length: -1: 400", x: one(req("POST", "/", "Content-Length: -1\r\n") + "abc")},
	{name: "cl-hex", what: "Content-Length: 0x3: 400", x: one(req("POST", "/", "Content-Length: 0x3\r\n") + "abc")},
	{name: "cl-comma-list", what: "Content-Length: 3, 3", x: one(req("POST", "/", "Content-Length: 3, 3\r\n") + "abc")},
	{name: "get-with-body", what: "a GET with a Content-Length body", x: one(req("GET", "/", "Content-Length: 3\r\n") + "abc")},
	{name: "te-chunked-uppercase", what: "Transfer-Encoding: Chunked",
		x: one(req("POST", "/", "Transfer-Encoding: Chunked\r\n") + "3\r\nabc\r\n0\r\n\r\n")},
	{name: "te-two-headers", what: "two Transfer-Encoding: chunked headers",
		x: one(req("POST", "/", "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n") + "3\r\nabc\r\n0\r\n\r\n")},
	{name: "pipelined-after-close", what: "Connection: close then a pipelined request: the second is not served",
		x: one(req("GET", "/", "Connection: close\r\n") + get)},
	{name: "head-close", what: "HEAD with Connection: close",
		x: confExchange{writes: []string{req("HEAD", "/setcl", "Connection: close\r\n")}, methods: []string{"HEAD"}}},
	{name: "two-cl-same", what: "two equal Content-Length values",
		x: one(req("POST", "/", "Content-Length: 3\r\nContent-Length: 3\r\n") + "abc")},
	{name: "te-chunked-identity", what: "Transfer-Encoding: chunked, identity: 501",
		x: one(req("POST", "/", "Transfer-Encoding: chunked, identity\r\n") + "5\r\nhello\r\n0\r\n\r\n")},
	{name: "te-gzip", what: "Transfer-Encoding: gzip: 501", x: one(req("POST", "/", "Transfer-Encoding: gzip\r\n") + "abc")},
	{name: "te-http10", what: "Transfer-Encoding: chunked on HTTP/1.0",
		x: one("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")},
	{name: "te-http10-keepalive", what: "HTTP/1.0 keep-alive with Transfer-Encoding and Content-Length, then a pipelined request",
		x: one("POST / HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\nhello" + get),
		h1: []string{`HTTP/1.0 200 framing=length=192 Content-Type="text/plain" Date=set X-Handler="1" body="POST / HTTP/1.0 *`,
			"after close: closed"},
		why: "h1 doc: an HTTP/1.0 request with a Transfer-Encoding is answered (without Connection: keep-alive), then the " +
			"connection closed (RFC 9112 section 6.1); net/http keeps it"},
	{name: "chunk-size-bad", what: "a chunk size that is not hex",
		x: one(req("POST", "/", "Transfer-Encoding: chunked\r\n") + "zz\r\nhello\r\n0\r\n\r\n" + get)},
	{name: "chunk-size-overflow", what: "a chunk size that overflows 64 bits",
		x: one(req("POST", "/", "Transfer-Encoding: chunked\r\n") + "ffffffffffffffffff\r\nhello\r\n0\r\n\r\n")},
	{name: "chunk-size-negative", what: "a chunk size with a sign",
		x: one(req("POST", "/", "Transfer-Encoding: chunked\r\n") + "-5\r\nhello\r\n0\r\n\r\n")},
	{name: "chunk-bare-lf", what: "chunk lines ended by a bare LF",
		x: one(req("POST", "/", "Transfer-Encoding: chunked\r\n") + "5\nhello\n0\n\n")},
	{name: "obs-fold", what: "an obs-folded header line", x: one(req("GET", "/", "X-A: a\r\n b\r\n"))},
	{name: "bare-lf", what: "header lines ended by a bare LF", x: one("GET / HTTP/1.1\nHost: a\n\n")},
	{name: "space-before-colon", what: "a space between a header name and the colon", x: one(req("GET", "/", "X-A : b\r\n"))},
	{name: "space-before-colon-cl", what: "Content-Length with a space before the colon",
		x: one(req("POST", "/", "Content-Length : 5\r\n") + "hello")},
	{name: "nul-in-value", what: "NUL in a header value: 400", x: one(req("GET", "/", "X-A: a\x00b\r\n"))},
	{name: "ctl-in-value", what: "a control character in a header value: 400", x: one(req("GET", "/", "X-A: a\x01b\r\n"))},
	{name: "del-in-value", what: "DEL in a header value: 400", x: one(req("GET", "/", "X-A: a\x7fb\r\n"))},
	{name: "bad-header-name", what: "a header name with a separator: 400", x: one(req("GET", "/", "X(A): b\r\n"))},
	{name: "missing-host-11", what: "no Host on HTTP/1.1: 400", x: one("GET / HTTP/1.1\r\n\r\n")},
	{name: "two-hosts", what: "two Host headers: 400", x: one(req("GET", "/", "Host: other.example\r\n"))},
	{name: "bad-host", what: "a malformed Host value: 400", x: one("GET / HTTP/1.1\r\nHost: a b\r\n\r\n")},
	{name: "bad-host-http10", what: "a malformed Host value on HTTP/1.0: 400", x: one("GET / HTTP/1.0\r\nHost: \"\r\n\r\n")},
	{name: "bad-host-obs-fold-http10", what: "an obs-folded malformed Host on HTTP/1.0 (found by FuzzServe): 400",
		x: one("GET / HTTP/1.0\nHost:\n \"\n\n")},
	{name: "bad-host-obs-fold-http11", what: "Host: a, folded onto a second line ( b): the value \"a b\" is malformed: 400",
		x: one("GET / HTTP/1.1\r\nHost: a\r\n b\r\n\r\n")},
	{name: "host-obs-fold-valid", what: "an empty Host line folded onto a valid value",
		x: one("GET / HTTP/1.1\r\nHost:\r\n a.example\r\n\r\n")},
	{name: "two-hosts-case", what: "two Host headers spelled in different case: 400",
		x: one("GET / HTTP/1.1\r\nhost: a\r\nHOST: b\r\n\r\n")},
	{name: "two-hosts-bare-lf", what: "two Host headers on bare-LF lines: 400", x: one("GET / HTTP/1.1\nHost: a\nHost: b\n\n")},
	{name: "host-tab", what: "a Host value after a tab", x: one("GET / HTTP/1.1\r\nHost:\ta.example\t\r\n\r\n")},
	{name: "host-like-names", what: "X-Host and Hostname are not Host: missing Host, 400",
		x: one("GET / HTTP/1.1\r\nX-Host: a\r\nHostname: b\r\n\r\n")},
	{name: "host-in-trailer", what: "a Host line in a chunked body's trailer is not a second Host",
		x: one(req("POST", "/", "Transfer-Encoding: chunked\r\n") + "3\r\nabc\r\n0\r\nHost: b\r\n\r\n")},
	{name: "host-in-pipelined-body", what: "a Host line inside a body is not a Host header of the next request",
		x: confExchange{writes: []string{req("POST", "/", "Content-Length: 9\r\n") + "Host: b\r\n" + "GET /2 HTTP/1.1\r\n\r\n"}, finals: 2}},
	{name: "empty-host", what: "an empty Host on HTTP/1.1", x: one("GET / HTTP/1.1\r\nHost:\r\n\r\n")},
	{name: "absolute-form", what: "an absolute-form target: its host wins over Host",
		x: one("GET http://target.example/p?q=1 HTTP/1.1\r\nHost: other.example\r\n\r\n")},
	{name: "connect", what: "CONNECT authority-form", x: one("CONNECT target.example:443 HTTP/1.1\r\nHost: target.example:443\r\n\r\n")},
	{name: "connect-no-host", what: "CONNECT without Host", x: one("CONNECT target.example:443 HTTP/1.1\r\n\r\n")},
	{name: "options-star", what: "OPTIONS *: answered by the server (as net/http's globalOptionsHandler)",
		x: one("OPTIONS * HTTP/1.1\r\n" + host + "\r\n")},
	{name: "get-star", what: "GET *", x: one("GET * HTTP/1.1\r\n" + host + "\r\n")},
	{name: "h2-preface", what: "the HTTP/2 preface on a plain HTTP/1 server",
		x: confExchange{writes: []string{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"}}},
	{name: "h2-preface-with-headers", what: "PRI * HTTP/2.0 with a header", x: one("PRI * HTTP/2.0\r\nHost: a\r\n\r\n")},
	{name: "pri-not-star", what: "PRI / HTTP/2.0: 505", x: one("PRI / HTTP/2.0\r\n\r\n")},
	{name: "http09", what: "an HTTP/0.9 request line: 400", x: one("GET /\r\n\r\n")},
	{name: "http20-line", what: "an HTTP/2.0 request line (not the preface): 505", x: one("GET / HTTP/2.0\r\n" + host + "\r\n")},
	{name: "http30-line", what: "an HTTP/3.0 request line: 505", x: one("GET / HTTP/3.0\r\n" + host + "\r\n")},
	{name: "http12-line", what: "HTTP/1.2 (a later 1.x)", x: one("GET / HTTP/1.2\r\n" + host + "\r\n")},
	{name: "bad-version", what: "a malformed version: 400", x: one("GET / HTTX/1.1\r\n" + host + "\r\n")},
	{name: "space-in-target", what: "a space inside the request target: 400", x: one("GET /a b HTTP/1.1\r\n" + host + "\r\n")},
	{name: "double-space-line", what: "two spaces after the method", x: one("GET  / HTTP/1.1\r\n" + host + "\r\n")},
	{name: "fragment-in-target", what: "a fragment in the request target", x: one("GET /a#frag HTTP/1.1\r\n" + host + "\r\n")},
	{name: "cl-empty", what: "an empty Content-Length", x: one(req("POST", "/", "Content-Length: \r\n") + "abc")},
	{name: "te-leading-space", what: "Transfer-Encoding with extra whitespace",
		x: one(req("POST", "/", "Transfer-Encoding:   chunked  \r\n") + "3\r\nabc\r\n0\r\n\r\n")},
	{name: "chunk-ext-long", what: "a 10 KB chunk extension",
		x: one(req("POST", "/", "Transfer-Encoding: chunked\r\n") + "3;e=" + strings.Repeat("x", 10000) + "\r\nabc\r\n0\r\n\r\n")},
	{name: "lowercase-method", what: "a lowercase method is a different method", x: one("get / HTTP/1.1\r\n" + host + "\r\n")},
	{name: "bad-method", what: "a method with a separator: 400", x: one("G(T / HTTP/1.1\r\n" + host + "\r\n")},
	{name: "leading-crlf", what: "a CRLF before the request line", x: one("\r\n" + get)},
	{name: "long-request-line-ok", what: "a 3 KB request line under MaxHeaderBytes plus slack",
		x: one(req("GET", "/"+strings.Repeat("a", 3000)))},
	{name: "long-request-line", what: "an 8 KB request line over MaxHeaderBytes plus slack: 431",
		x: one(req("GET", "/"+strings.Repeat("a", 8000)))},
	{name: "headers-within-slack", what: "3 KB of headers: over MaxHeaderBytes, within its 4096 slack",
		x: one(req("GET", "/", "X-Big: "+strings.Repeat("h", 3000)+"\r\n"))},
	{name: "headers-over-limit", what: "8 KB of headers: 431",
		x: one(req("GET", "/", "X-Big: "+strings.Repeat("h", 8000)+"\r\n"))},
	{name: "headers-over-limit-many", what: "many small headers over the limit: 431",
		x: one(req("GET", "/", strings.Repeat("X-M: 0123456789\r\n", 500)))},
	{name: "second-request-over-limit", what: "the second request on a connection, 8 KB of headers: over the limit plus slack",
		x: confExchange{writes: []string{get, req("GET", "/", "X-Big: "+strings.Repeat("h", 8000)+"\r\n")}, finals: 2},
		h1: []string{
			"=", // the first request: as net/http answers it
			`431 (server) connection=""`,
			"after close: closed",
		},
		why: "h1 doc, Decision: the header bound counts from every request's first byte; net/http's idle-wait " +
			"read is not counted, so it serves a kept-alive connection's next request with up to ~4 KiB more (finding F5)"},
}

// confMaxHeader is MaxHeaderBytes in the differential table (net/http allows 4096
// more).
const confMaxHeader = 1024

func TestConformance(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	cfg := confConfig{Handler: http.HandlerFunc(confHandler), MaxHeaderBytes: confMaxHeader}
	std, dut := startPair(t, cfg)
	for _, c := range confCases {
		t.Run(c.name, func(t *testing.T) {
			want := exchange(t, std.addr, c.x)
			got := exchange(t, dut.addr, c.x)
			t.Logf("net/http:\n\t%s", strings.Join(want.lines, "\n\t"))
			expect := want.lines
			if c.h1 != nil {
				expect = c.h1
			}
			if !matchLines(got.lines, expect, want.lines) {
				t.Errorf("%s\nsent: %q\nnet/http:\n\t%s\nh1:\n\t%s\nwant for h1 (%s):\n\t%s\nraw net/http: %q\nraw h1: %q",
					c.what, trunc(strings.Join(c.x.writes, ""), 300),
					strings.Join(want.lines, "\n\t"), strings.Join(got.lines, "\n\t"),
					orStr(c.why, "as net/http"), strings.Join(expect, "\n\t"),
					trunc(string(want.raw), 600), trunc(string(got.raw), 600))
			}
		})
	}
}

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "...(" + strconv.Itoa(len(s)) + " bytes)"
}

func orStr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// matchLines reports whether got matches want line by line: a want line "=" matches
// std's line at the same index (net/http's answer), one ending in "*" any line with
// the prefix before it ("*" alone: any line), any other only itself.
func matchLines(got, want, std []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i, w := range want {
		switch p, prefix := strings.CutSuffix(w, "*"); {
		case w == "=":
			if i >= len(std) || got[i] != std[i] {
				return false
			}
		case prefix:
			if !strings.HasPrefix(got[i], p) {
				return false
			}
		case got[i] != w:
			return false
		}
	}
	return true
}

// TestConformanceConcurrent runs the table's cases that end with the connection kept
// (answers that do not depend on timing) from several goroutines at once against each
// server: every answer must still be the one net/http gives to the case alone (a
// buffer shared between connections, a pooled reader or writer reused too early, or a
// data race under -race would show here).
func TestConformanceConcurrent(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	cfg := confConfig{Handler: http.HandlerFunc(confHandler), MaxHeaderBytes: confMaxHeader}
	std, dut := startPair(t, cfg)
	var cases []confCase
	var wants [][]string
	for _, c := range confCases {
		if c.h1 != nil {
			continue
		}
		want := exchange(t, std.addr, c.x).lines
		if want[len(want)-1] == "probe: served" {
			cases, wants = append(cases, c), append(wants, want)
		}
	}
	const workers, rounds = 4, 2
	for _, s := range []*confServed{std, dut} {
		t.Run(s.name, func(t *testing.T) {
			var wg sync.WaitGroup
			for g := range workers {
				wg.Go(func() {
					for r := range rounds {
						for i := range cases {
							k := (i + g*len(cases)/workers + r) % len(cases) // each worker starts elsewhere
							if got := exchange(t, s.addr, cases[k].x).lines; !slices.Equal(got, wants[k]) {
								t.Errorf("%s (worker %d, round %d): got\n\t%s\nwant\n\t%s", cases[k].name, g, r,
									strings.Join(got, "\n\t"), strings.Join(wants[k], "\n\t"))
							}
						}
					}
				})
			}
			wg.Wait()
		})
	}
}
