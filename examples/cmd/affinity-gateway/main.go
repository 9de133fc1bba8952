// Command gateway runs the example session-affinity gateway in front of
// OpenAI-compatible inference servers.
//
//	go run -C examples ./cmd/affinity-gateway -config configs/gateway.yaml
//
// It shuts down gracefully on SIGINT or SIGTERM. See package gateway for the routing,
// health and configuration details.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", strings.TrimPrefix(err.Error(), "gateway: "))
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	configPath := fs.String("config", "configs/gateway.yaml", "path to the YAML configuration")
	listen := fs.String("listen", "", "override the configured listen address (host:port)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))

	cfg, err := gateway.LoadConfig(*configPath)
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	g, err := gateway.New(cfg, gateway.WithLogger(logger))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger.Info("gateway listening", "listen", cfg.Listen, "backends", len(cfg.Backends),
		"active_health", cfg.Health.Enabled, "session_headers", cfg.SessionHeaders)
	if err := g.ListenAndServe(ctx); err != nil {
		return err
	}
	logger.Info("gateway stopped")
	return nil
}
