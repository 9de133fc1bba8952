package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

func TestIsConnectError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, dialErr := net.Dial("tcp", addr) // refused: nothing listens there any more
	require.Error(t, dialErr)

	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"dial refused", dialErr, true},
		{"wrapped dial refused", fmt.Errorf("proxy: %w", dialErr), true},
		{"eof before response", io.EOF, true},
		{"unexpected eof", io.ErrUnexpectedEOF, true},
		{"canceled", context.Canceled, false},
		{"deadline", context.DeadlineExceeded, false},
		{"other", errors.New("net/http: invalid header field"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, gateway.IsConnectError(tt.err))
		})
	}
}
