package extproc

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// exchange is the state of one HTTP request on one stream.
type exchange struct {
	s                     *Server
	first                 bool // the first message has been seen
	reqDuplex, respDuplex bool // FULL_DUPLEX_STREAMED (else BUFFERED or NONE)
	req                   *http.Request
	subset                map[string]bool // nil: no subset hint
	body                  []byte          // the request body so far
	reserved              int64           // bytes of body's buffer charged to max_inflight_bytes
	slot                  bool            // holds one of limits.max_inflight_requests
	decided               bool
	headersAnswered       bool // BUFFERED: the request headers were answered already
	decision              gateway.Decision
	endpoint              string
	leased                bool
}

// release ends what the exchange holds: its body's bytes, its request slot and its lease.
func (x *exchange) release() {
	x.freeBody()
	x.endLease()
}

// endLease ends the decision's lease and returns its request slot.
func (x *exchange) endLease() {
	if x.slot {
		x.slot = false
		x.s.g.ReleaseRequest()
	}
	if x.leased {
		x.leased = false
		x.s.inflight.Add(-1)
		x.decision.Done() // ends the Scheduler's lease: the backend's outstanding load drops
	}
}

func (x *exchange) handle(req *extprocv3.ProcessingRequest) (out []*extprocv3.ProcessingResponse, done bool, err error) {
	if !x.first {
		x.first = true
		if pc := req.GetProtocolConfig(); pc != nil {
			if m := pc.GetRequestBodyMode(); m == filterv3.ProcessingMode_NONE {
				// No request body would ever come: the decision reads it (model, tier, cost,
				// cache_salt), so a request with a body would wait for it until the body
				// read timeout. Refused like the other modes it cannot serve.
				return nil, true, fmt.Errorf("%w: request body mode NONE (the picker reads the request body; want FULL_DUPLEX_STREAMED or BUFFERED)", ErrUnsupportedMode)
			}
			if x.reqDuplex, err = duplex(pc.GetRequestBodyMode()); err != nil {
				return nil, true, err
			}
			if x.respDuplex, err = duplex(pc.GetResponseBodyMode()); err != nil {
				return nil, true, err
			}
		}
	}
	switch r := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		if x.req != nil || x.decided {
			return nil, true, fmt.Errorf("%w: request headers after the request headers", ErrSequence)
		}
		if resp := checkHeaders(r.RequestHeaders.GetHeaders(), x.s.g.Config().Limits.MaxHeaderBytes); resp != nil {
			x.s.requests.WithLabelValues("rejected").Inc()
			return []*extprocv3.ProcessingResponse{resp}, true, nil
		}
		// The path as Envoy forwards it, checked before anything is decided, as the HTTP
		// gateway checks it (Decide checks the parsed path again; this catches a :path
		// that does not parse, which toRequest reads as "/").
		if err := gateway.CheckPath(rawPath(r.RequestHeaders.GetHeaders())); err != nil {
			x.s.requests.WithLabelValues("rejected").Inc()
			msg := (&gateway.RequestError{Status: http.StatusBadRequest, Code: "invalid_path", Err: err}).ClientMessage()
			return []*extprocv3.ProcessingResponse{immediate(http.StatusBadRequest, "invalid_path", msg)}, true, nil
		}
		x.req = toRequest(r.RequestHeaders.GetHeaders())
		if x.subset, err = subsetHint(req.GetMetadataContext()); err != nil {
			x.s.requests.WithLabelValues("rejected").Inc()
			return []*extprocv3.ProcessingResponse{immediate(http.StatusBadRequest, "invalid_subset_hint", err.Error())}, true, nil
		}
		if r.RequestHeaders.GetEndOfStream() {
			return x.decide(nil)
		}
		if !x.reqDuplex { // BUFFERED: Envoy waits for this answer before sending the body
			x.headersAnswered = true
			return []*extprocv3.ProcessingResponse{requestHeaders(nil, nil)}, false, nil
		}
		return nil, false, nil
	case *extprocv3.ProcessingRequest_RequestBody:
		if x.req == nil { // never after a decision: decide sets it
			return nil, true, fmt.Errorf("%w: request body (%d bytes)", ErrNoRequestHeaders, len(r.RequestBody.GetBody()))
		}
		if x.decided {
			return nil, true, fmt.Errorf("%w: request body after the routing decision", ErrSequence)
		}
		if resp := x.appendBody(r.RequestBody.GetBody()); resp != nil {
			return []*extprocv3.ProcessingResponse{resp}, true, nil
		}
		if r.RequestBody.GetEndOfStream() {
			return x.decide(nil)
		}
		return nil, false, nil
	case *extprocv3.ProcessingRequest_RequestTrailers:
		trailers := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{}}}
		if x.decided {
			return []*extprocv3.ProcessingResponse{trailers}, false, nil
		}
		if x.req == nil {
			return nil, true, fmt.Errorf("%w: request trailers", ErrNoRequestHeaders)
		}
		return x.decide(trailers)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		if r.ResponseHeaders.GetEndOfStream() {
			x.release()
		}
		if served := servedEndpoint(req.GetMetadataContext()); served != "" && x.decided && served != x.endpoint {
			// The data plane reports another endpoint than the pick (a retry or a
			// proxy-side override): the binding still names the pick.
			x.s.servedElsewhere.Inc()
			x.s.log.Debug("endpoint picker: served by another endpoint", "picked", x.endpoint, "served", served)
		}
		cr := &extprocv3.CommonResponse{}
		if x.decision.BackendID != "" { // no decision (response before any request): set nothing
			cr.HeaderMutation = &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				header(strings.ToLower(gateway.HeaderBackend), x.decision.BackendID),
				header(strings.ToLower(gateway.HeaderAffinityHit), fmt.Sprint(x.decision.AffinityHit)),
			}}
		}
		return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
			ResponseHeaders: &extprocv3.HeadersResponse{Response: cr}}}}, false, nil
	case *extprocv3.ProcessingRequest_ResponseBody:
		eos := r.ResponseBody.GetEndOfStream()
		if eos {
			x.release() // the lease ends with the response stream
		}
		br := &extprocv3.BodyResponse{}
		if x.respDuplex { // pass the chunk through unchanged
			br.Response = &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
				Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{
					Body: r.ResponseBody.GetBody(), EndOfStream: eos}}}}
		}
		return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}}, false, nil
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		x.release()
		return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
			ResponseTrailers: &extprocv3.TrailersResponse{}}}}, false, nil
	}
	return nil, false, nil
}

// duplex maps the announced body mode: FULL_DUPLEX_STREAMED -> true; BUFFERED and NONE
// -> false; anything else is ErrUnsupportedMode.
func duplex(m filterv3.ProcessingMode_BodySendMode) (bool, error) {
	switch m {
	case filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		return true, nil
	case filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_NONE:
		return false, nil
	}
	return false, fmt.Errorf("%w: %s (want FULL_DUPLEX_STREAMED or BUFFERED)", ErrUnsupportedMode, m)
}

// decide picks the endpoint once the request headers and body are complete and returns
// the answers for the messages held back (then trailer, if not nil).
// handle calls it at most once per stream (ErrSequence guards the rest); were it called
// again, the earlier lease is released first, so no lease outlives its stream.
func (x *exchange) decide(trailer *extprocv3.ProcessingResponse) ([]*extprocv3.ProcessingResponse, bool, error) {
	x.endLease()
	x.decided = true
	if x.req == nil { // unreachable: handle refuses body and trailers before headers (ErrNoRequestHeaders)
		x.req = toRequest(nil)
	}
	var allow func(string) bool
	if x.subset != nil {
		allow = func(id string) bool { return x.subset[x.s.endpoint[id]] }
	}
	if !x.s.g.AcquireRequest() {
		x.s.requests.WithLabelValues("unavailable").Inc()
		return []*extprocv3.ProcessingResponse{x.s.overloaded("requests in flight exceed limits.max_inflight_requests")}, true, nil
	}
	x.slot = true // until the lease ends (release)
	d, err := x.s.g.Decide(x.req, x.body, allow)
	if err != nil {
		re := &gateway.RequestError{Status: http.StatusInternalServerError, Code: "routing_error", Err: err}
		errors.As(err, &re)
		code, status := re.Code, re.Status
		result := "rejected"
		if status == http.StatusServiceUnavailable {
			result = "unavailable"
		}
		x.s.requests.WithLabelValues(result).Inc()
		r := immediate(status, code, re.ClientMessage())
		if status == http.StatusServiceUnavailable { // no_backend_available: as the HTTP gateway's
			ir := r.GetImmediateResponse()
			ir.Headers.SetHeaders = append(ir.Headers.SetHeaders,
				header("retry-after", strconv.Itoa(x.s.g.Config().Limits.RetryAfterSeconds)))
		}
		return []*extprocv3.ProcessingResponse{r}, true, nil
	}
	x.decision, x.endpoint = d, x.s.endpoint[d.BackendID]
	x.leased = true
	x.s.inflight.Add(1)
	switch {
	case !d.Bound: // no session, or hashed by it without a binding: neither hit nor miss
		x.s.requests.WithLabelValues("unbound").Inc()
	case d.AffinityHit:
		x.s.requests.WithLabelValues("hit").Inc()
	default:
		x.s.requests.WithLabelValues("miss").Inc()
	}
	meta := destinationMetadata(x.endpoint)
	set := []*corev3.HeaderValueOption{header(HeaderDestination, x.endpoint)}
	var out []*extprocv3.ProcessingResponse
	changed := !bytes.Equal(d.Body, x.body)
	switch {
	case x.reqDuplex:
		out = append(out, requestHeaders(set, meta))
		if len(x.body) > 0 || changed {
			out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
				RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
					Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{
						Body: d.Body, EndOfStream: trailer == nil}}}}}}})
		}
	case !x.headersAnswered: // BUFFERED, headers only: the headers answer carries it
		out = append(out, requestHeaders(set, meta))
	default: // BUFFERED: the body answer mutates the held-back headers
		cr := &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set}, ClearRouteCache: true}
		if changed {
			cr.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: d.Body}}
		}
		out = append(out, &extprocv3.ProcessingResponse{DynamicMetadata: meta,
			Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: cr}}})
	}
	if trailer != nil {
		out = append(out, trailer)
	}
	return out, false, nil
}
