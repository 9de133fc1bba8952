package gateway_test

import (
	"errors"
	"os"
	"testing"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// FuzzParseConfig: any bytes give a Config or an error wrapping ErrInvalidConfig, never
// a panic; the wrong-type messages (nameTypeErrors) included.
func FuzzParseConfig(f *testing.F) {
	shipped, err := os.ReadFile("../configs/gateway.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(shipped)
	f.Add([]byte(minimal))
	f.Add([]byte(minimal + "timeouts:\n  read_body_seconds: abc\n"))
	f.Add([]byte("backends:\n  - {id: a, url: \"http://127.0.0.1:8001\", weight: heavy}\n"))
	f.Add([]byte(minimal + "max_body_bytes: [1, 2]\ndrain_seconds: {a: 1}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := gateway.ParseConfig(data); err != nil && !errors.Is(err, gateway.ErrInvalidConfig) {
			t.Fatalf("error not wrapping ErrInvalidConfig: %v", err)
		}
	})
}
