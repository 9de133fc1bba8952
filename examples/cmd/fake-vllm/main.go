// Command fake-vllm serves one fakevllm SIMULATOR of an OpenAI-compatible vLLM server on a
// port, for demos and manual tests of a gateway. It runs no model: see package
// github.com/agentserve/sessionaffinity/examples/fakevllm for the cache and latency model.
//
//	go run -C examples ./cmd/fake-vllm -addr 127.0.0.1:8001 -id b1 -time-scale 0.1
//
// It shuts down gracefully on SIGINT or SIGTERM (in-flight requests get -shutdown-timeout
// to finish; a negative -shutdown-timeout is an error). Decision: a numeric flag given
// as 0 is an error (-max-concurrent 0 would otherwise mean the default, 4, without a
// word; so would -time-scale 0 mean 1), with the same message as a negative one
// ("must be > 0"); omit the flag for the default.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/agentserve/sessionaffinity/examples/fakevllm"
)

// commandName names the command in its usage text ("Usage of fake-vllm:") and errors.
const commandName = "fake-vllm"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, errorLine(err))
		os.Exit(1)
	}
}

// errorLine is err as the command prints it: "fake-vllm: " once, without the package's
// own "fakevllm: " prefix (fakevllm.ErrInvalidConfig's text starts with it).
func errorLine(err error) string {
	return commandName + ": " + strings.TrimPrefix(err.Error(), "fakevllm: ")
}

// checkFlags refuses numeric flags given out of range, naming the flag and its rule.
// fakevllm.Config takes 0 for "the default": given on the command line, 0 is an error
// rather than a silent default, and a negative (or, for -time-scale, non-finite) value
// gets the same message, so the rule reads the same whichever side it is broken on.
// -shutdown-timeout must be >= 0 (0: in-flight requests are cut at once).
func checkFlags(fs *flag.FlagSet, cfg fakevllm.Config, shutdownTimeout time.Duration) error {
	bad := map[string]bool{
		"block-tokens": cfg.BlockTokens <= 0, "cache-blocks": cfg.CacheBlocks <= 0,
		"prefill-per-token": cfg.PrefillPerToken <= 0, "decode-per-token": cfg.DecodePerToken <= 0,
		"max-concurrent": cfg.MaxConcurrent <= 0, "default-max-tokens": cfg.DefaultMaxTokens <= 0,
		"time-scale": !(cfg.TimeScale > 0) || math.IsInf(cfg.TimeScale, 0),
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch {
		case err != nil:
		case f.Name == "time-scale" && bad[f.Name]:
			err = fmt.Errorf("-%s %s: must be a finite number > 0 (omit the flag for the default, %s)", f.Name, f.Value, f.DefValue)
		case bad[f.Name]:
			err = fmt.Errorf("-%s %s: must be > 0 (omit the flag for the default, %s)", f.Name, f.Value, f.DefValue)
		case f.Name == "shutdown-timeout" && shutdownTimeout < 0:
			err = fmt.Errorf("-%s %s: must be >= 0 (0: in-flight requests are cut at once)", f.Name, f.Value)
		}
	})
	return err
}

// run parses args, serves until ctx is done, then shuts down gracefully. It logs the
// listening address ("listening" with addr=host:port) to logOut.
func run(ctx context.Context, args []string, logOut io.Writer) error {
	fs := flag.NewFlagSet(commandName, flag.ContinueOnError)
	fs.SetOutput(logOut)
	var cfg fakevllm.Config
	addr := fs.String("addr", "127.0.0.1:8000", "listen address (host:port; port 0 picks a free one)")
	fs.StringVar(&cfg.ID, "id", fakevllm.DefaultID, "backend ID (X-Fakevllm-Backend header, /metrics label)")
	fs.StringVar(&cfg.Model, "model", fakevllm.DefaultModel, "model name listed by /v1/models")
	fs.IntVar(&cfg.BlockTokens, "block-tokens", fakevllm.DefaultBlockTokens, "prefix-cache block size in tokens (> 0)")
	fs.IntVar(&cfg.CacheBlocks, "cache-blocks", fakevllm.DefaultCacheBlocks, "prefix-cache capacity in blocks, LRU (> 0)")
	fs.DurationVar(&cfg.PrefillPerToken, "prefill-per-token", fakevllm.DefaultPrefillPerToken, "simulated prefill time per uncached prompt token (> 0)")
	fs.DurationVar(&cfg.DecodePerToken, "decode-per-token", fakevllm.DefaultDecodePerToken, "simulated decode time per output token (> 0)")
	fs.IntVar(&cfg.MaxConcurrent, "max-concurrent", fakevllm.DefaultMaxConcurrent, "running sequences (>= 1); the rest wait FIFO")
	fs.Float64Var(&cfg.TimeScale, "time-scale", fakevllm.DefaultTimeScale, "multiplies every simulated duration, e.g. 0.01 (finite, > 0)")
	fs.IntVar(&cfg.DefaultMaxTokens, "default-max-tokens", fakevllm.DefaultMaxTokens, "output tokens when a request sets no max_tokens (> 0)")
	fs.BoolVar(&cfg.NoPromptTokensDetails, "no-prompt-tokens-details", false, "send usage.prompt_tokens_details as null, like vLLM without --enable-prompt-tokens-details (its default)")
	shutdownTimeout := fs.Duration("shutdown-timeout", 10*time.Second, "grace period for in-flight requests on SIGINT/SIGTERM (>= 0)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := checkFlags(fs, cfg, *shutdownTimeout); err != nil {
		return err
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
