package extproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Building and reading the protocol's messages.

// requestHeaders answers the request headers, setting set (if any) and the metadata.
func requestHeaders(set []*corev3.HeaderValueOption, meta *structpb.Struct) *extprocv3.ProcessingResponse {
	cr := &extprocv3.CommonResponse{}
	if len(set) > 0 {
		cr.HeaderMutation = &extprocv3.HeaderMutation{SetHeaders: set}
		cr.ClearRouteCache = true
	}
	return &extprocv3.ProcessingResponse{DynamicMetadata: meta,
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: cr}}}
}

func header(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
}

// destinationMetadata is {"envoy.lb": {"x-gateway-destination-endpoint": endpoint}}.
func destinationMetadata(endpoint string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		MetadataNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			MetadataKeyDestination: structpb.NewStringValue(endpoint)}})}}
}

// immediate is an ImmediateResponse with the gateway's JSON error body: the OpenAI shape
// with Anthropic's top-level "type":"error", as the HTTP gateway writes it.
func immediate(status int, code, msg string) *extprocv3.ProcessingResponse {
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "server_error"
	}
	body, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"message": msg, "type": typ, "code": code}})
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(status)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{header("content-type", "application/json")}},
			Body:    body,
			Details: "agentserve_epp_" + code,
		}}}
}

// toRequest builds the http.Request Decide reads from Envoy's header map (pseudo-headers
// :method, :path, :authority; values from raw_value or value).
func toRequest(hm *corev3.HeaderMap) *http.Request {
	r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/"}, Header: http.Header{}}
	for _, h := range hm.GetHeaders() {
		v := h.GetValue()
		if len(h.GetRawValue()) > 0 {
			v = string(h.GetRawValue())
		}
		switch h.GetKey() {
		case ":method":
			r.Method = v
		case ":path":
			if u, err := url.ParseRequestURI(v); err == nil {
				r.URL = u
			}
		case ":authority":
			r.Host = v
		default:
			if !strings.HasPrefix(h.GetKey(), ":") {
				r.Header.Add(h.GetKey(), v)
			}
		}
	}
	return r
}

// rawPath returns the path of Envoy's :path pseudo-header as sent (raw_value or value),
// without its query; "" when there is none.
func rawPath(hm *corev3.HeaderMap) string {
	for _, h := range hm.GetHeaders() {
		if h.GetKey() != ":path" {
			continue
		}
		v := h.GetValue()
		if len(h.GetRawValue()) > 0 {
			v = string(h.GetRawValue())
		}
		p, _, _ := strings.Cut(v, "?")
		return p
	}
	return ""
}

// servedEndpoint returns envoy.lb/x-gateway-destination-endpoint-served ("" if absent).
func servedEndpoint(md *corev3.Metadata) string {
	return md.GetFilterMetadata()[MetadataNamespace].GetFields()[ServedKey].GetStringValue()
}

// ErrSubsetHint is the cause of the 400 "invalid_subset_hint" answer to a subset hint
// that is not a list of strings (for example one string instead of a list of one).
var ErrSubsetHint = errors.New("extproc: subset hint " + SubsetNamespace + "/" + SubsetKey + " must be a list of ip:port strings")

// subsetHint returns the set of endpoints of the data plane's subset hint, or nil when
// the request carries none. A present but empty list gives an empty (non-nil) set; a
// value that is not a list of strings is ErrSubsetHint.
func subsetHint(md *corev3.Metadata) (map[string]bool, error) {
	ns, ok := md.GetFilterMetadata()[SubsetNamespace]
	if !ok {
		return nil, nil
	}
	v, ok := ns.GetFields()[SubsetKey]
	if !ok {
		return nil, nil
	}
	list, ok := v.GetKind().(*structpb.Value_ListValue)
	if !ok {
		return nil, fmt.Errorf("%w, got %s", ErrSubsetHint, kindName(v))
	}
	set := map[string]bool{}
	for i, e := range list.ListValue.GetValues() {
		if _, ok := e.GetKind().(*structpb.Value_StringValue); !ok {
			return nil, fmt.Errorf("%w, got %s at index %d", ErrSubsetHint, kindName(e), i)
		}
		set[e.GetStringValue()] = true
	}
	return set, nil
}

// kindName names the JSON kind of v, for error messages (never its content).
func kindName(v *structpb.Value) string {
	switch v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return "a string"
	case *structpb.Value_NumberValue:
		return "a number"
	case *structpb.Value_BoolValue:
		return "a bool"
	case *structpb.Value_StructValue:
		return "an object"
	case *structpb.Value_ListValue:
		return "a list"
	}
	return "null"
}
