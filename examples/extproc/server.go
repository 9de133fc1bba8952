package extproc

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// Names of the Endpoint Picker Protocol (gateway-api-inference-extension,
// docs/proposals/004-endpoint-picker-protocol).
const (
	// HeaderDestination is the request header carrying the picked endpoint (ip:port).
	HeaderDestination = "x-gateway-destination-endpoint"
	// MetadataNamespace is the dynamic-metadata namespace of the picked endpoint.
	MetadataNamespace = "envoy.lb"
	// MetadataKeyDestination is the key of the picked endpoint in MetadataNamespace.
	MetadataKeyDestination = "x-gateway-destination-endpoint"
	// SubsetNamespace is the filter-metadata namespace of the data plane's subset hint.
	SubsetNamespace = "envoy.lb.subset_hint"
	// SubsetKey is the key of the subset hint: a list of ip:port the pick must come from.
	SubsetKey = "x-gateway-destination-endpoint-subset"
	// ServedKey is the key (in MetadataNamespace) of the endpoint that actually served
	// the request, sent by the data plane with the response.
	ServedKey = "x-gateway-destination-endpoint-served"
)

// Health service names reported by [Server.Register] (gRPC Health Checking Protocol).
const (
	HealthLiveness  = "liveness"
	HealthReadiness = "readiness"
	HealthExtProc   = "envoy.service.ext_proc.v3.ExternalProcessor"
)

// ErrUnsupportedMode is returned (as gRPC Unimplemented) when the data plane announces a
// request body mode other than FULL_DUPLEX_STREAMED or BUFFERED (NONE included: the
// picker needs the body), or a response body mode other than those two or NONE.
var ErrUnsupportedMode = errors.New("extproc: unsupported body send mode")

// ErrEndpointHost is returned by [New] when a backend's URL host is a name rather than
// an IP address: the picked endpoint must be ip:port for Envoy's ORIGINAL_DST cluster,
// which connects to it without resolving names. Resolve the name in the YAML (or run
// the picker where the backends' addresses are known) instead.
var ErrEndpointHost = errors.New("extproc: backend url host must be an IP address")

// ErrSequence is returned (as gRPC InvalidArgument, ending the stream) when a stream
// carries more than one request: request headers after the request headers or after the
// routing decision, or request body after the decision. Envoy sends one request per
// stream; refusing the rest keeps one stream to one decision and one lease, which the
// stream's end releases.
var ErrSequence = errors.New("extproc: message out of sequence: one request per stream")

// ErrNoRequestHeaders is returned (as gRPC InvalidArgument, ending the stream with no
// answer and no routing decision) when request body or request trailers arrive before
// the request headers. Envoy always sends the headers first; a client that does not is
// broken or hostile, and a decision made on empty headers (no session, tier or tenant)
// would bind nothing useful and hold a request slot and a lease for it. Not counted in
// agentserve_extproc_requests_total, like the other protocol errors.
var ErrNoRequestHeaders = errors.New("extproc: message out of sequence: request body or trailers before the request headers")

// Server is an Envoy ext_proc server that picks an inference endpoint for each request
// with a [gateway.Gateway]'s routing (session headers, tier, tenant scope, the
// affinity Scheduler) and answers in the Endpoint Picker Protocol. Create with [New];
// serve with [Server.Register] on a grpc.Server. Safe for concurrent use: one gRPC stream
// per HTTP request, each handled on its own goroutine by grpc-go.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	g        *gateway.Gateway
	log      *slog.Logger
	timer    func(time.Duration) (<-chan time.Time, func() bool) // the body read timeout's timer
	maxBody  int64
	endpoint map[string]string // backend id -> ip:port
	inflight atomic.Int64

	inflightGauge   prometheus.GaugeFunc
	requests        *prometheus.CounterVec
	servedElsewhere prometheus.Counter
}

// Option configures [New].
type Option func(*Server)

// WithLogger sets the logger (default: discard). Session IDs and tenant identities are
// never logged.
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// New builds a Server on g (whose Config supplies the backends, headers, tiers and
// max_body_bytes) and registers its metrics on g.Registry():
// agentserve_extproc_requests_total{result} (hit, miss, unbound: no session, or hashed
// by it without a binding, neither hit nor miss as in the HTTP gateway; rejected,
// unavailable),
// agentserve_extproc_inflight_requests and agentserve_extproc_served_elsewhere_total. Each backend's endpoint is the host:port of
// its URL (port 80/443 by scheme when absent). Errors: [ErrEndpointHost] when a
// backend's URL host is not an IP address (names are refused, not resolved: a name
// resolved once at start would go stale), metric registration.
func New(g *gateway.Gateway, opts ...Option) (*Server, error) {
	s := &Server{g: g, maxBody: g.Config().MaxBodyBytes, endpoint: map[string]string{}, timer: realTimer}
	for _, o := range opts {
		o(s)
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	for i, b := range g.Config().Backends {
		u, err := url.Parse(b.URL)
		if err != nil {
			return nil, fmt.Errorf("extproc: backend %q: %w", b.ID, err)
		}
		if _, err := netip.ParseAddr(u.Hostname()); err != nil {
			return nil, fmt.Errorf("%w: backends[%d] (id %q) url: %q: host %q is not an IP address, "+
				"and x-gateway-destination-endpoint must be ip:port for Envoy's ORIGINAL_DST cluster",
				ErrEndpointHost, i, b.ID, b.URL, u.Hostname())
		}
		s.endpoint[b.ID] = hostPort(u)
	}
	s.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentserve_extproc_requests_total",
		Help: "Requests the endpoint picker answered, by result (hit, miss, unbound, rejected, unavailable)."}, []string{"result"})
	s.inflightGauge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentserve_extproc_inflight_requests",
		Help: "Requests with a picked endpoint whose response stream has not ended."},
		func() float64 { return float64(s.inflight.Load()) })
	s.servedElsewhere = prometheus.NewCounter(prometheus.CounterOpts{Name: "agentserve_extproc_served_elsewhere_total",
		Help: "Responses whose x-gateway-destination-endpoint-served metadata named another endpoint than the pick."})
	for _, c := range []prometheus.Collector{s.requests, s.inflightGauge, s.servedElsewhere} {
		if err := g.Registry().Register(c); err != nil {
			return nil, fmt.Errorf("extproc: registering metrics: %w", err)
		}
	}
	for _, r := range []string{"hit", "miss", "unbound", "rejected", "unavailable"} {
		s.requests.WithLabelValues(r)
	}
	return s, nil
}

// hostPort returns u's host:port, adding the scheme's default port.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// InFlight returns the number of requests with a picked endpoint whose response stream
// has not ended (end of stream, trailers, client cancel or error).
func (s *Server) InFlight() int { return int(s.inflight.Load()) }

// Register registers the ext_proc service and the gRPC health service on gs, and returns
// the health server so the caller can report NOT_SERVING (hs.Shutdown) before stopping.
// "", "liveness", "readiness" and "envoy.service.ext_proc.v3.ExternalProcessor" report
// SERVING.
func (s *Server) Register(gs *grpc.Server) *health.Server {
	extprocv3.RegisterExternalProcessorServer(gs, s)
	hs := health.NewServer()
	for _, name := range []string{"", HealthLiveness, HealthReadiness, HealthExtProc} {
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	healthpb.RegisterHealthServer(gs, hs)
	return hs
}

// Process handles one HTTP request/response exchange (one gRPC stream). It returns nil
// when the data plane closes the stream or cancels it, or after an immediate response.
//
// Limits (of the gateway's configuration): the request body is charged to
// limits.max_inflight_bytes as its buffer grows and returned once the decision is
// sent; the decision holds one of limits.max_inflight_requests until the lease ends
// (either over its cap: ImmediateResponse 503 "overloaded" with Retry-After);
// timeouts.read_body_seconds bounds the time from the stream's start to the decision
// (exceeded: ImmediateResponse 408); limits.max_header_bytes bounds the request
// headers (names, values and 4 bytes a line, as in HTTP/1; over: 431); a header value
// with a control character (NUL, CR, LF, ...) is refused with 400, as net/http does.
// It starts one goroutine per stream to receive, which ends with the stream.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	x := &exchange{s: s, reqDuplex: true, respDuplex: true}
	defer x.release()
	ctx := stream.Context()
	msgs := make(chan received)
	go receive(ctx, stream, msgs)
	cfg := s.g.Config()
	timeout, stopTimer := s.timer(seconds(cfg.Timeouts.ReadBodySeconds))
	defer stopTimer()
	for {
		var m received
		select {
		case m = <-msgs:
		case <-ctx.Done():
			return nil
		case <-timeout:
			s.requests.WithLabelValues("rejected").Inc()
			_ = stream.Send(immediate(http.StatusRequestTimeout, "request_timeout", fmt.Sprintf(
				"request body not received within timeouts.read_body_seconds (%v s)", cfg.Timeouts.ReadBodySeconds)))
			return nil
		}
		req, err := m.req, m.err
		if err == io.EOF || status.Code(err) == codes.Canceled || ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		out, done, err := x.handle(req)
		if err != nil {
			code := codes.Unimplemented
			if errors.Is(err, ErrSequence) || errors.Is(err, ErrNoRequestHeaders) {
				code = codes.InvalidArgument
			}
			return status.Error(code, err.Error()) // the deferred release ends any lease
		}
		for _, r := range out {
			if err := stream.Send(r); err != nil {
				return err
			}
		}
		if done {
			return nil
		}
		if x.decided {
			timeout = nil
			x.freeBody() // the body has been sent back: its bytes leave the budget
		}
	}
}
