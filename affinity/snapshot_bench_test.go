package affinity_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
)

// BenchmarkRestore restores a snapshot of 100,000 bindings (36-byte session IDs) into an
// empty Scheduler: the start-up cost of binding_snapshot and of an affinity reload.
func BenchmarkRestore(b *testing.B) {
	cfg := affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(600)}
	src, err := affinity.New(cfg, affinity.WithClock(affinitytest.NewClock(t0)))
	if err != nil {
		b.Fatal(err)
	}
	cands := backends(b, 8)
	for i := range 100_000 {
		if _, _, err := src.SelectBackend(fmt.Sprintf("%036d", i), "", cands); err != nil {
			b.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := src.Snapshot(&buf); err != nil {
		b.Fatal(err)
	}
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		dst, _ := affinity.New(cfg, affinity.WithClock(affinitytest.NewClock(t0)))
		if n, err := dst.Restore(bytes.NewReader(data)); err != nil || n != 100_000 {
			b.Fatal(n, err)
		}
	}
}
