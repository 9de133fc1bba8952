package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strings"
)

// ErrBadResponse is wrapped by the errors of requests whose backend answered with
// something that is not a usable HTTP/1.x response: bytes that do not parse as a status
// line and header block, response headers over 10 MiB, more than 100 informational (1xx)
// responses (backend_client direct; nethttp bounds them by the header size), or a
// 101 Switching Protocols to a request that asked for no upgrade, or for another protocol.
// The client gets a JSON 502 backend_bad_response (code_class 5xx, source gateway), the
// connection is closed, and the backend gets one connection failure for outlier
// detection (see [OutlierConfig]): a backend whose /health says 200 but whose answers do
// not parse is ejected like one that resets connections.
var ErrBadResponse = errors.New("gateway: malformed backend response")

// badResponse wraps err, a failure to read a response head, in [ErrBadResponse] when it
// is a protocol error rather than an I/O one (the connection closed, reset or timed out:
// those keep their own classification, IsConnectError or a timeout) or the context's end.
func badResponse(err error) error {
	if err == nil || errors.Is(err, ErrBadResponse) || isIOError(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrBadResponse, err)
}

// isIOError reports whether err is the connection's or the context's rather than a
// parse error: EOF, a closed connection, any net.Error (resets, timeouts), a
// cancellation.
func isIOError(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.As(err, &ne) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// netHTTPBadResponse is badResponse for the errors of net/http.Transport (backend_client
// nethttp), which exports no type for them: a textproto.ProtocolError (a malformed header
// line), or one of its messages for a malformed status line, oversized headers or too
// many 1xx responses. Any other error is returned unchanged.
func netHTTPBadResponse(err error) error {
	if err == nil || isIOError(err) {
		return err
	}
	if pe := textproto.ProtocolError(""); errors.As(err, &pe) {
		return fmt.Errorf("%w: %w", ErrBadResponse, err)
	}
	msg := err.Error()
	for _, s := range []string{"malformed HTTP ", "malformed MIME header", "server response headers exceeded",
		"too many 1xx informational responses"} {
		if strings.Contains(msg, s) {
			return fmt.Errorf("%w: %w", ErrBadResponse, err)
		}
	}
	return err
}

// badUpgrade returns an error wrapping [ErrBadResponse] when resp is a 101 Switching
// Protocols that req did not ask for — no Upgrade in req, or another protocol than the
// one it named (the check httputil.ReverseProxy makes before it opens a tunnel, which it
// answers with a 502 that would otherwise not count) — and nil otherwise.
func badUpgrade(req *http.Request, resp *http.Response) error {
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return nil
	}
	asked, got := upgradeType(req.Header), upgradeType(resp.Header)
	if asked != "" && strings.EqualFold(asked, got) {
		return nil
	}
	if asked == "" {
		return fmt.Errorf("%w: 101 Switching Protocols (to %q) to a request without Upgrade", ErrBadResponse, got)
	}
	return fmt.Errorf("%w: 101 Switching Protocols to %q when %q was requested", ErrBadResponse, got, asked)
}

// badStatus returns an error wrapping [ErrBadResponse] when code is not an HTTP status
// code (outside 100-599: "HTTP/1.1 999 Weird" or "HTTP/1.1 099 X" parse), nil otherwise.
func badStatus(code int) error {
	if code >= 100 && code <= 599 {
		return nil
	}
	return fmt.Errorf("%w: status code %d is outside 100-599", ErrBadResponse, code)
}

// upgradeType is h's Upgrade value when its Connection header lists "upgrade", "" otherwise.
func upgradeType(h http.Header) string {
	for _, v := range h["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return h.Get("Upgrade")
			}
		}
	}
	return ""
}
