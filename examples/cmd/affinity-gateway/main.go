// Command gateway runs the example session-affinity gateway in front of
// OpenAI-compatible inference servers.
//
//	go run -C examples ./cmd/affinity-gateway -config configs/gateway.yaml
//
// It shuts down gracefully on SIGINT or SIGTERM (in-flight requests get drain_seconds;
// with binding_snapshot set the bindings are saved for the next start); a second SIGINT
// or SIGTERM during the drain ends it at once (Gateway.EndDrain: the requests still
// running are cut, the bindings are still saved). SIGHUP reloads
// the configuration file in place (Gateway.Reload); -watch-config 2s also reloads it when
// it changes. A rejected reload is logged and the previous configuration keeps serving.
// See package gateway for the routing, health and configuration details.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentserve/sessionaffinity/affinity/redisstore"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// commandName names the command in its usage text ("Usage of affinity-gateway:").
const commandName = "affinity-gateway"

// activeHealth is the effective health.enabled of cfg: an unset value (nil) means on.
func activeHealth(cfg gateway.Config) bool {
	return cfg.Health.Enabled == nil || *cfg.Health.Enabled
}

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", strings.TrimPrefix(err.Error(), "gateway: "))
		os.Exit(1)
	}
}

// run is the command: args without the program name; usage, flag errors and logs go
// to stderr.
func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet(commandName, flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "configs/gateway.yaml", "path to the YAML configuration")
	listen := fs.String("listen", "", "override the configured listen address (host:port)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile (pprof) to this file until shutdown")
	watch := fs.Duration("watch-config", 0, "poll the config file this often and reload it when it changes (0: only on SIGHUP)")
	procs := fs.Int("gomaxprocs", 0, "run Go code on at most this many OS threads at once (runtime.GOMAXPROCS; 0: Go's default, the CPUs available); 1 keeps the scheduler's hand-offs on one thread, see docs/gateway.md")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *procs < 0 || *procs > maxGOMAXPROCS {
		return fmt.Errorf("-gomaxprocs: %d: must be 0 (Go's default) or in [1, %d]", *procs, maxGOMAXPROCS)
	} else if *procs > 0 {
		setGOMAXPROCS(*procs)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))

	cfg, err := gateway.LoadConfig(*configPath)
	if err != nil {
		return err
	}
	override := func(c *gateway.Config) {
		if *listen != "" {
			c.Listen = *listen
		}
	}
	override(&cfg)
	if cfg.Store != nil {
		// go-redis has one process-wide logger (stderr by default, a line per failed
		// dial): route it into this logger at DEBUG. The store logs the outage and the
		// recovery itself, once each (WARN, INFO). run is main's body: set once per process.
		redis.SetLogger(redisstore.PrintfLogger{Logger: logger, Level: slog.LevelDebug})
	}
	g, err := gateway.New(cfg, gateway.WithLogger(logger))
	if err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	term := make(chan os.Signal, 2)
	signal.Notify(term, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(term)
	ended := make(chan struct{})
	defer close(ended)
	go shutdownOnSignals(term, ended, stop, g.EndDrain, logger)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go reloadOnSignals(ctx, hup, ended, func() {
		logger.Info("SIGHUP: reloading config", "path", *configPath)
		_ = g.ReloadFileFor(*configPath, gateway.TriggerSIGHUP, override) // logs the outcome
	}, logger)
	if *watch > 0 {
		t := time.NewTicker(*watch)
		defer t.Stop()
		go func() { _ = g.WatchConfig(ctx, *configPath, t.C, override) }()
	}
	logger.Info("gateway starting", "listen", cfg.Listen, "backends", len(cfg.Backends), "gomaxprocs", runtime.GOMAXPROCS(0),
		"active_health", activeHealth(cfg), "session_headers", cfg.SessionHeaders)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("gateway: listen %s: %w", cfg.Listen, err)
	}
	// Serve logs "gateway listening" once admin_listen is bound too: an exit because
	// that address is taken must not have claimed to listen.
	if err := g.Serve(ctx, ln); err != nil {
		return err
	}
	logger.Info("gateway stopped")
	return nil
}

// shutdownOnSignals cancels the serving context (stop) on the first signal from term,
// which starts the drain, and ends the drain at once (endDrain: Gateway.EndDrain) on the
// second: kill twice = now. It returns after the second signal or when ended is closed.
func shutdownOnSignals(term <-chan os.Signal, ended <-chan struct{}, stop, endDrain func(), logger *slog.Logger) {
	for n := 0; ; n++ {
		select {
		case <-ended:
			return
		case sig := <-term:
			if n == 0 {
				logger.Info("shutting down: draining in-flight requests; send the signal again to end the drain now", "signal", sig.String())
				stop()
				continue
			}
			logger.Warn("second signal: ending the drain now", "signal", sig.String())
			endDrain()
			return
		}
	}
}

// reloadOnSignals calls reload for each signal from hup until the serving context ctx is
// done (the shutdown drain began); a SIGHUP after that is logged as ignored, not applied
// (tester33: it was ignored without a word). It returns when ended is closed.
func reloadOnSignals(ctx context.Context, hup <-chan os.Signal, ended <-chan struct{}, reload func(), logger *slog.Logger) {
	for {
		select {
		case <-ended:
			return
		case <-hup:
			if ctx.Err() != nil {
				logger.Info("SIGHUP ignored: the gateway is shutting down")
				continue
			}
			reload()
		}
	}
}

// maxGOMAXPROCS bounds -gomaxprocs: 1024 threads running Go code at once is far more
// than a proxy can use, and the Go runtime spends minutes starting a value like 99999
// (its per-P structures and GC workers) before the gateway could log anything.
const maxGOMAXPROCS = 1024

// setGOMAXPROCS sets runtime.GOMAXPROCS to n (> 0) for the rest of the process and
// returns the previous value. The command does this only when -gomaxprocs is given: a
// small-request proxy at low concurrency spends more CPU on the Go scheduler handing
// work between threads (an idle P's thread woken for the per-request goroutine and read
// deadlines of net/http's server, then put back to sleep) than on proxying, and with one
// P those hand-offs stay on one thread. The price is throughput: Go code then runs on one
// core. The default (0) keeps Go's choice, right for a gateway with cores of its own.
func setGOMAXPROCS(n int) int { return runtime.GOMAXPROCS(n) }
