// Command affinity-epp is an Envoy external-processing (ext_proc) endpoint picker that
// speaks the Gateway API Inference Extension's Endpoint Picker Protocol and keeps every
// turn of an agent session on the same inference backend.
//
//	go run -C examples/extproc ./cmd/affinity-epp   # -config ../configs/gateway.yaml
//
// It reads the example gateway's YAML (backends with their drain, session and parent headers, tiers,
// tenant, health, affinity, metrics, max_body_bytes, limits.max_inflight_bytes,
// limits.max_inflight_requests, limits.max_header_bytes, timeouts.read_body_seconds;
// the package documentation lists what is ignored), serves ext_proc and gRPC health on -grpc and
// /metrics and /healthz on -metrics, and runs the health prober. With a store: block,
// go-redis's own messages (a line per failed dial) go into the same log at DEBUG (-v)
// instead of raw onto stderr. Ctrl-C stops it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/agentserve/sessionaffinity/affinity/redisstore"
	"github.com/agentserve/sessionaffinity/examples/extproc"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "affinity-epp:", err)
		os.Exit(1)
	}
}

// run serves until ctx is done or a server fails. It writes the log (and flag errors) to
// stderr. ready, if not nil, is called with the bound addresses once both listeners are
// open.
func run(ctx context.Context, args []string, stderr io.Writer, ready func(grpcAddr, metricsAddr string)) error {
	fs := flag.NewFlagSet("affinity-epp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	config := fs.String("config", "../configs/gateway.yaml", "gateway YAML (backends, headers, tiers, health, affinity)")
	grpcAddr := fs.String("grpc", "127.0.0.1:9002", "ext_proc + gRPC health listen address")
	metricsAddr := fs.String("metrics", "127.0.0.1:9090", "HTTP listen address of /metrics and /healthz")
	verbose := fs.Bool("v", false, "debug logging")
	if err := fs.Parse(args); err != nil {
		return err
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	cfg, err := gateway.LoadConfig(*config)
	if err != nil {
		return err
	}
	if cfg.Store != nil {
		// go-redis has one process-wide logger (stderr by default, a line per failed
		// dial): route it into this logger at DEBUG, as affinity-gateway does. The store
		// logs the outage and the recovery itself, once each (WARN, INFO). run is main's
		// body: set once per process.
		redis.SetLogger(redisstore.PrintfLogger{Logger: log, Level: slog.LevelDebug})
	}
	g, err := gateway.New(cfg, gateway.WithLogger(log))
	if err != nil {
		return err
	}
	defer g.Close()
	srv, err := extproc.New(g, extproc.WithLogger(log))
	if err != nil {
		return err
	}

	ctx, stop := context.WithCancel(ctx)
	defer stop()

	gl, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		return err
	}
	gs := grpc.NewServer()
	hs := srv.Register(gs)
	ml, err := net.Listen("tcp", *metricsAddr)
	if err != nil {
		gl.Close()
		return err
	}
	mux := http.NewServeMux() // the gateway serves /metrics and /healthz; nothing is proxied here
	mux.Handle("/metrics", g)
	mux.Handle("/healthz", g)
	hsrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	errc := make(chan error, 3)
	go func() { errc <- g.Run(ctx) }()
	go func() { errc <- gs.Serve(gl) }()
	go func() {
		if err := hsrv.Serve(ml); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
			return
		}
		errc <- nil
	}()
	log.Info("endpoint picker listening", "grpc", gl.Addr().String(), "metrics", ml.Addr().String(), "backends", len(cfg.Backends))
	if ready != nil {
		ready(gl.Addr().String(), ml.Addr().String())
	}

	pending := 3 // Run and the two servers each send once on errc
	select {
	case <-ctx.Done():
	case err = <-errc:
		pending--
	}
	stop()
	hs.Shutdown() // report NOT_SERVING while in-flight streams finish
	gs.GracefulStop()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hsrv.Shutdown(sctx)
	for range pending { // wait for the goroutines, so none outlives run
		select {
		case <-errc:
		case <-sctx.Done():
		}
	}
	return err
}
