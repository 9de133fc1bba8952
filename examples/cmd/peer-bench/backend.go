package main

import (
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/agentserve/sessionaffinity/examples/fakevllm"
)

// backendSrv is one fakevllm simulator on its own loopback listener, in this process, so
// that it can be killed (listener and connections closed, like a crash) and restarted on
// the same address.
type backendSrv struct {
	id, addr string
	cfg      fakevllm.Config
	opts     []fakevllm.Option
	sim      *fakevllm.Server
	mu       sync.Mutex
	srv      *http.Server
	done     chan struct{}
}

func startBackend(id string, cfg fakevllm.Config, opts ...fakevllm.Option) (*backendSrv, error) {
	cfg.ID = id
	sim, err := fakevllm.New(cfg, opts...)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &backendSrv{id: id, addr: ln.Addr().String(), cfg: cfg, opts: opts, sim: sim}
	b.serve(ln)
	return b, nil
}

func (b *backendSrv) url() string { return "http://" + b.addr }

func (b *backendSrv) serve(ln net.Listener) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.srv = &http.Server{Handler: b.sim, ReadHeaderTimeout: 10 * time.Second}
	b.done = make(chan struct{})
	srv, done := b.srv, b.done
	go func() { _ = srv.Serve(ln); close(done) }()
}

// kill closes the listener and every connection at once.
func (b *backendSrv) kill() {
	b.mu.Lock()
	srv, done := b.srv, b.done
	b.srv = nil
	b.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
		<-done
	}
}

// restart serves again on the same address (retrying while the port is in TIME_WAIT)
// with a fresh simulator: like a restarted vLLM, its prefix cache is empty.
func (b *backendSrv) restart() error {
	sim, err := fakevllm.New(b.cfg, b.opts...)
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.sim = sim
	b.mu.Unlock()
	for range 50 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", b.addr); err == nil {
			b.serve(ln)
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}
