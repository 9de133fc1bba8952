// Command fakevllm serves one fakevllm SIMULATOR of an OpenAI-compatible vLLM server on a
// port, for demos and manual tests of a gateway. It runs no model: see package
// github.com/agentserve/sessionaffinity/examples/fakevllm for the cache and latency model.
//
//	go run -C examples ./cmd/fake-vllm -addr 127.0.0.1:8001 -id b1 -time-scale 0.1
//
// It shuts down gracefully on SIGINT or SIGTERM (in-flight requests get -shutdown-timeout
// to finish).
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

	"github.com/agentserve/sessionaffinity/examples/fakevllm"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "fakevllm:", err)
		os.Exit(1)
	}
}

// run parses args, serves until ctx is done, then shuts down gracefully. It logs the
// listening address ("listening" with addr=host:port) to logOut.
func run(ctx context.Context, args []string, logOut io.Writer) error {
	fs := flag.NewFlagSet("fakevllm", flag.ContinueOnError)
	fs.SetOutput(logOut)
	var cfg fakevllm.Config
	addr := fs.String("addr", "127.0.0.1:8000", "listen address (host:port; port 0 picks a free one)")
	fs.StringVar(&cfg.ID, "id", fakevllm.DefaultID, "backend ID (X-Fakevllm-Backend header, /metrics label)")
	fs.StringVar(&cfg.Model, "model", fakevllm.DefaultModel, "model name listed by /v1/models")
	fs.IntVar(&cfg.BlockTokens, "block-tokens", fakevllm.DefaultBlockTokens, "prefix-cache block size in tokens")
	fs.IntVar(&cfg.CacheBlocks, "cache-blocks", fakevllm.DefaultCacheBlocks, "prefix-cache capacity in blocks (LRU)")
	fs.DurationVar(&cfg.PrefillPerToken, "prefill-per-token", fakevllm.DefaultPrefillPerToken, "simulated prefill time per uncached prompt token")
	fs.DurationVar(&cfg.DecodePerToken, "decode-per-token", fakevllm.DefaultDecodePerToken, "simulated decode time per output token")
	fs.IntVar(&cfg.MaxConcurrent, "max-concurrent", fakevllm.DefaultMaxConcurrent, "running sequences; the rest wait FIFO")
	fs.Float64Var(&cfg.TimeScale, "time-scale", fakevllm.DefaultTimeScale, "multiplies every simulated duration (e.g. 0.01)")
	fs.IntVar(&cfg.DefaultMaxTokens, "default-max-tokens", fakevllm.DefaultMaxTokens, "output tokens when a request sets no max_tokens")
	shutdownTimeout := fs.Duration("shutdown-timeout", 10*time.Second, "grace period for in-flight requests on SIGINT/SIGTERM")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	srv, err := fakevllm.New(cfg)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(logOut, nil))
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	eff := srv.Config()
	log.Info("listening", "addr", ln.Addr().String(), "id", eff.ID, "model", eff.Model,
		"note", "fakevllm is a SIMULATOR, not vLLM", "time_scale", eff.TimeScale,
		"max_concurrent", eff.MaxConcurrent, "cache_blocks", eff.CacheBlocks)

	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", shutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), *shutdownTimeout)
	defer cancel()
	shutdownErr := hs.Shutdown(sctx)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if shutdownErr != nil {
		return fmt.Errorf("graceful shutdown: %w", shutdownErr)
	}
	return nil
}
