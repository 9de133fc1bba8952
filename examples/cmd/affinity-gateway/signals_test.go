package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// The first SIGINT/SIGTERM starts the drain (stop), the second ends it at once
// (endDrain); a run that ends first ends the watcher without either.
func TestShutdownOnSignals(t *testing.T) {
	tests := []struct {
		name          string
		signals       int
		wantStop      bool
		wantEndDrain  bool
		closeEndedFor bool // run returns before (more) signals
	}{
		{"one signal: drain", 1, true, false, true},
		{"two signals: drain, then now", 2, true, true, false},
		{"no signal: run ended", 0, false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			term := make(chan os.Signal)
			ended := make(chan struct{})
			stopped, drained := make(chan struct{}), make(chan struct{})
			returned := make(chan struct{})
			go func() {
				defer close(returned)
				shutdownOnSignals(term, ended, func() { close(stopped) }, func() { close(drained) }, slog.New(slog.DiscardHandler))
			}()
			sigs := []os.Signal{syscall.SIGTERM, os.Interrupt}
			for i := range tt.signals {
				term <- sigs[i] // unbuffered: received by the watcher
			}
			if tt.closeEndedFor {
				close(ended)
			}
			<-returned
			require.Equal(t, tt.wantStop, isClosed(stopped), "stop")
			require.Equal(t, tt.wantEndDrain, isClosed(drained), "endDrain")
		})
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// A SIGHUP reloads while the gateway serves; once the drain began (the serving context is
// done) it is logged as ignored and reloads nothing. (Before: silently ignored, tester33.)
func TestReloadOnSignals(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	hup, ended, returned := make(chan os.Signal), make(chan struct{}), make(chan struct{})
	reloaded := make(chan struct{}, 3) // buffered: a wrong reload during the drain does not block
	var logs strings.Builder
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	go func() {
		defer close(returned)
		reloadOnSignals(ctx, hup, ended, func() { reloaded <- struct{}{} }, logger)
	}()
	for range 2 {
		hup <- syscall.SIGHUP
		<-reloaded
	}
	stop() // the drain begins
	hup <- syscall.SIGHUP
	close(ended)
	<-returned // the last SIGHUP was handled: ended is looked at only between signals
	select {
	case <-reloaded:
		t.Fatal("a SIGHUP during the drain reloaded")
	default:
	}
	require.Equal(t, 1, strings.Count(logs.String(), "SIGHUP ignored: the gateway is shutting down"))
}
