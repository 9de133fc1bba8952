package extproc

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// received is one result of stream.Recv.
type received struct {
	req *extprocv3.ProcessingRequest
	err error
}

// receive forwards stream's messages to msgs until a receive fails (the stream ended:
// Process has returned or the data plane closed it) or ctx is done.
func receive(ctx context.Context, stream extprocv3.ExternalProcessor_ProcessServer, msgs chan<- received) {
	for {
		req, err := stream.Recv()
		select {
		case msgs <- received{req, err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// realTimer is the default timer of the body read timeout.
func realTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// seconds converts a configuration's seconds to a Duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// headerLineOverhead is what each header line costs beyond its name and value in HTTP/1
// (": " and CRLF), counted against limits.max_header_bytes.
const headerLineOverhead = 4

// checkHeaders returns the ImmediateResponse refusing hm, or nil when it is acceptable:
// 431 when its names, values and headerLineOverhead a line exceed max bytes; 400 when a
// value holds a control character other than tab (NUL, CR, LF, DEL...), which net/http
// refuses too. Values are never quoted in the answer (they may be session IDs).
func checkHeaders(hm *corev3.HeaderMap, max int) *extprocv3.ProcessingResponse {
	size := 0
	for _, h := range hm.GetHeaders() {
		v := h.GetRawValue()
		if len(v) == 0 {
			v = []byte(h.GetValue())
		}
		size += len(h.GetKey()) + len(v) + headerLineOverhead
		if size > max {
			return immediate(http.StatusRequestHeaderFieldsTooLarge, "request_header_fields_too_large",
				fmt.Sprintf("request headers exceed limits.max_header_bytes (%d bytes)", max))
		}
		for _, c := range v {
			if (c < 0x20 && c != '\t') || c == 0x7f {
				return immediate(http.StatusBadRequest, "invalid_header",
					fmt.Sprintf("header %q: value holds a control character", h.GetKey()))
			}
		}
	}
	return nil
}

// appendBody appends p to the request body, charging each growth of its buffer to
// limits.max_inflight_bytes before it is made (the buffer doubles, from 512 bytes, up to
// max_body_bytes). It returns the ImmediateResponse ending the stream on failure: 413
// over max_body_bytes, 503 over the budget.
func (x *exchange) appendBody(p []byte) *extprocv3.ProcessingResponse {
	need := int64(len(x.body)) + int64(len(p))
	if need > x.s.maxBody {
		x.s.requests.WithLabelValues("rejected").Inc()
		return immediate(http.StatusRequestEntityTooLarge, "request_too_large",
			fmt.Sprintf("request body exceeds max_body_bytes (%d bytes)", x.s.maxBody))
	}
	if old := int64(cap(x.body)); need > old {
		c := min(max(2*old, need, 512), x.s.maxBody)
		if !x.s.g.ReserveBytes(c - old) {
			x.s.requests.WithLabelValues("unavailable").Inc()
			return x.s.overloaded("request bytes in flight exceed limits.max_inflight_bytes")
		}
		x.reserved += c - old
		nb := make([]byte, len(x.body), c)
		copy(nb, x.body)
		x.body = nb
	}
	x.body = append(x.body, p...)
	return nil
}

// freeBody drops the request body and returns its bytes to the budget.
func (x *exchange) freeBody() {
	x.body = nil
	x.s.g.ReleaseBytes(x.reserved)
	x.reserved = 0
}

// overloaded is the gateway's JSON 503 "overloaded" with Retry-After.
func (s *Server) overloaded(what string) *extprocv3.ProcessingResponse {
	r := immediate(http.StatusServiceUnavailable, "overloaded", "gateway overloaded: "+what+"; retry later")
	ir := r.GetImmediateResponse()
	ir.Headers.SetHeaders = append(ir.Headers.SetHeaders,
		header("retry-after", strconv.Itoa(s.g.Config().Limits.RetryAfterSeconds)))
	return r
}
