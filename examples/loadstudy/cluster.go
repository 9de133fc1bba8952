package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/agentserve/sessionaffinity/examples/fakevllm"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// Simulated backend costs (before TimeScale): fakevllm's defaults, 1 ms per uncached
// prompt token and 20 ms per output token, 4 running sequences per backend.
const (
	prefillPerToken = time.Millisecond
	decodePerToken  = 20 * time.Millisecond
	maxConcurrent   = 4
	modelName       = "fake-model"
)

// cluster is N fakevllm backends and a gateway, all on loopback ephemeral ports.
type cluster struct {
	backends []*fakevllm.Server
	urls     []string
	gwURL    string
	gw       *gateway.Gateway
	stop     func()
}

func startCluster(p Params, cond Condition) (*cluster, error) {
	c := &cluster{}
	var servers []*http.Server
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = func() {
		cancel()
		for _, s := range servers {
			_ = s.Close()
		}
		wg.Wait()
	}
	var opts []fakevllm.Option
	if p.Sleep != nil {
		opts = append(opts, fakevllm.WithSleep(p.Sleep))
	}
	gcfg := gateway.Config{Listen: "127.0.0.1:0"}
	if cond.Load != nil {
		gcfg.Affinity.Load = *cond.Load
	}
	for i := range p.Backends {
		id := fmt.Sprintf("vllm-%d", i+1)
		srv, err := fakevllm.New(fakevllm.Config{
			ID:              id,
			Model:           modelName,
			PrefillPerToken: prefillPerToken,
			DecodePerToken:  decodePerToken,
			MaxConcurrent:   maxConcurrent,
			TimeScale:       p.TimeScale,

			NoPromptTokensDetails: p.NoPromptTokensDetails,
		}, opts...)
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("fakevllm: %w", err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			c.stop()
			return nil, err
		}
		hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, hs)
		wg.Go(func() { _ = hs.Serve(ln) })
		u := "http://" + ln.Addr().String()
		c.backends = append(c.backends, srv)
		c.urls = append(c.urls, u)
		gcfg.Backends = append(gcfg.Backends, gateway.BackendConfig{ID: id, URL: u, Weight: 1})
	}
	g, err := gateway.New(gcfg, gateway.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		c.stop()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.stop()
		return nil, err
	}
	c.gw = g
	c.gwURL = "http://" + ln.Addr().String()
	wg.Go(func() { _ = g.Serve(ctx, ln) })
	return c, nil
}
