// Package h1 is a plain-text HTTP/1.x server that serves an http.Handler with
// net/http's own request parser (http.ReadRequest), on one goroutine per connection.
//
// Why: net/http's server starts a background read on each request's connection once
// its body has been read (to notice a client leaving), and stops it after the handler
// with a past read deadline and a condition-variable wait: about three goroutine
// wake-ups per request, which at low concurrency cost the example gateway more latency
// and CPU than its proxying. Here nothing but the connection's goroutine runs for a
// short request; a request still running after [Server.ClientGoneAfter] gets the
// watch (see below).
//
// What it does as net/http's HTTP/1 server does (same status codes, and a
// Connection: close answer where net/http answers one):
//
//   - Request line and headers bounded by MaxHeaderBytes (+ 4096 bytes of slack):
//     431 Request Header Fields Too Large, then the write side is closed and the
//     connection closed once the client closes or after 500 ms. Decision: the bound
//     counts from the request's first byte on every request; net/http counts from after
//     its idle-wait read, so a kept-alive connection's later requests may have up to
//     about 4 KiB more there.
//   - A malformed request (as http.ReadRequest reports it, more than one Host header
//     included): 400 Bad Request. An unsupported or repeated Transfer-Encoding: 501 Not
//     Implemented. A protocol other than HTTP/1.x (the "PRI * HTTP/2.0" preface
//     excepted): 505 HTTP Version Not Supported: unsupported protocol version.
//   - HTTP/1.1 without a Host header (CONNECT and the HTTP/2 preface excepted): 400 Bad
//     Request: missing required Host header; a Host header that is not a valid host:
//     400 Bad Request: malformed Host header; a header field name or value that is not
//     valid: 400 Bad Request: invalid header name / invalid header value.
//   - A read error, timeout or EOF before a request is complete: no answer, the
//     connection is closed.
//   - Content-Length and Transfer-Encoding together: framed by the Transfer-Encoding
//     (http.ReadRequest drops the Content-Length), answered, then the connection is
//     closed, as RFC 9112 section 6.1 requires of a server; so is an HTTP/1.0 request
//     with a Transfer-Encoding (which http.ReadRequest ignores: framed by its
//     Content-Length, or without a body). Decision: net/http keeps such connections
//     open; here the bytes after the request are never served.
//   - Expect: 100-continue on HTTP/1.1 with a body: "100 Continue" is written at the
//     body's first read (not after a final response); any other Expect value: 417
//     Expectation Failed and the connection closed.
//   - OPTIONS * is answered 200 with Content-Length: 0 (net/http's
//     globalOptionsHandler) without calling the Handler.
//   - The HTTP/2 preface ("PRI * HTTP/2.0") goes to the Handler; the connection closes
//     after the answer. CONNECT (authority-form) and absolute-form URLs are parsed by
//     http.ReadRequest and go to the Handler.
//   - Request: RemoteAddr, RequestURI, a context derived from [Server.BaseContext]
//     (with http.LocalAddrContextKey, and http.ServerContextKey holding the *Server,
//     not an *http.Server: httputil.ReverseProxy aborts a response it cannot finish
//     with http.ErrAbortHandler only when that key is set) cancelled when the handler
//     returns, and earlier with cause [ErrClientGone] when reading the body or writing
//     the response fails (EOF, reset, a deadline), as net/http cancels it. The body's
//     read deadline, when the handler set one, is cleared at the body's end; once the
//     response header is written (without EnableFullDuplex) the unread body is
//     discarded and a later Read returns http.ErrBodyReadAfterClose.
//   - After the handler: a body not read to its end is discarded up to 256 KiB, else the
//     connection closes (Connection: close is sent when the response is still to be
//     written); keep-alive per HTTP/1.0 (Connection: keep-alive and a known length) and
//     HTTP/1.1 rules and Connection: close from either side; pipelined requests are
//     served in order (bytes already read are the next request).
//   - A handler panic other than http.ErrAbortHandler is logged with its stack to
//     ErrorLog; the connection is closed either way.
//
// The ResponseWriter frames as net/http's: a Content-Length set by the handler is sent
// and enforced (a longer Write returns http.ErrContentLength; a shorter body closes the
// connection); a body of at most 2048 bytes written before the handler returns without
// a Flush gets a Content-Length; otherwise chunked on HTTP/1.1 (Transfer-Encoding:
// identity: close-delimited) and close-delimited on HTTP/1.0. Trailers (declared in a
// Trailer header, or keys with http.TrailerPrefix) are sent after a chunked body. No
// body for HEAD (its Writes are counted, not sent), 1xx, 204 and 304. Date is added when
// not set (formatted once a second), Content-Type is sniffed (http.DetectContentType)
// when missing and the body is not empty and has no Content-Encoding. WriteHeader with
// a 1xx code other than 101 writes it at once with the current headers (not cleared);
// 101 is final. http.ResponseController finds Flush (FlushError), SetReadDeadline,
// SetWriteDeadline (cleared after the response), Hijack and EnableFullDuplex. A write
// after Hijack returns http.ErrHijacked. A response of up to 4 KiB is one write system
// call. WriteHeader with a code outside 100-999 (a panic in net/http) is logged and
// answered 500.
//
// The client-gone watch: net/http cancels a request's context as soon as its client
// closes the connection; handlers (the gateway's) rely on it to abandon work nobody
// will read. Here one sweeper goroutine per Server, ticking every ClientGoneAfter/2
// only while requests are in flight, starts a watcher for each request running longer
// than ClientGoneAfter whose body has been read to its end (never while the handler may
// still read it): a goroutine reading one byte from the connection. EOF or an error
// cancels the request's context with cause [ErrClientGone] and the connection closes
// after the response; a byte (the next pipelined request) is kept for the next
// request; a read deadline the handler set firing cancels too, as net/http.
// The handler's return stops the watcher (a past read deadline, a wait, the deadline
// cleared). The trade: a client leaving is noticed within ClientGoneAfter plus a tick,
// not at once; a failed write of the response cancels the context at once.
//
// Concurrency and cost: Serve, Shutdown and Close are safe for concurrent use; a
// ResponseWriter, as net/http's, is not (but for SetReadDeadline, which may stop a read
// from another goroutine). One goroutine per connection; per request, the allocations
// of http.ReadRequest, one request context, one ResponseWriter; the response header is
// serialized into a buffer the connection reuses; bufio readers and writers (4 KiB) are
// pooled. The sweeper keeps ticking while any handler runs, hijacked ones (tunnels)
// included, and sleeps otherwise.
//
// Not done (the gateway needs none of it): TLS, HTTP/2 (h2c), ConnState hooks,
// ConnContext, ReadTimeout and WriteTimeout (handlers set deadlines per request),
// MaxBytesReader's connection close (its hook is net/http's own: a body over a
// MaxBytesReader is discarded up to 256 KiB like any unread one).
package h1
