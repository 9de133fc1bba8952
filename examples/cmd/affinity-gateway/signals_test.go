package main

import (
	"log/slog"
	"os"
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
