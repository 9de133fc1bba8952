package gateway

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// trickle returns at most n bytes a Read, as a slow client's body does.
type trickle struct {
	r io.Reader
	n int
}

func (t trickle) Read(p []byte) (int, error) { return t.r.Read(p[:min(len(p), t.n)]) }

// readRequestBody charges the buffer as it grows: the charges add up to the final
// capacity (the Content-Length when known, at most twice the body otherwise), the first
// charge is one chunk at most, and a refused charge stops the read.
func TestReadRequestBodyChargesAsItGrows(t *testing.T) {
	const limit = 8 << 20
	for _, tc := range []struct {
		name    string
		size    int
		known   bool
		budget  int64 // 0: unlimited
		wantErr error
	}{
		{"small known", 300, true, 0, nil},
		{"chunk known", bodyChunk, true, 0, nil},
		{"large known", 5<<20 + 7, true, 0, nil},
		{"max known", limit, true, 0, nil},
		{"small chunked", 300, false, 0, nil},
		{"large chunked", 5<<20 + 7, false, 0, nil},
		{"max chunked", limit, false, 0, nil},
		{"over limit chunked", limit + 1, false, 0, &http.MaxBytesError{}},
		{"over budget known", 1 << 20, true, 256 << 10, errOverBudget},
		{"over budget chunked", 1 << 20, false, 256 << 10, errOverBudget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := bytes.Repeat([]byte("x"), tc.size)
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", trickle{bytes.NewReader(body), 40 << 10})
			r.ContentLength = int64(tc.size)
			if !tc.known {
				r.ContentLength = -1
			}
			var charged, first int64
			charge := func(n int64) bool {
				if first == 0 {
					first = n
				}
				if tc.budget > 0 && charged+n > tc.budget {
					return false
				}
				charged += n
				return true
			}
			got, err := readRequestBody(httptest.NewRecorder(), r, limit, charge)
			if tc.wantErr != nil {
				var mb *http.MaxBytesError
				if errors.As(tc.wantErr, &mb) {
					assert.True(t, errors.As(err, &mb), "err %v", err)
				} else {
					assert.ErrorIs(t, err, tc.wantErr)
				}
				if tc.budget > 0 {
					assert.LessOrEqual(t, charged, tc.budget)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, body, got)
			assert.Equal(t, int64(cap(got)), charged, "charges add up to the buffer held")
			assert.LessOrEqual(t, first, int64(bodyChunk))
			if tc.known {
				assert.Equal(t, tc.size, cap(got), "exactly the Content-Length")
			} else {
				assert.LessOrEqual(t, cap(got), max(2*tc.size, firstChunkedBuffer))
			}
		})
	}
}

// stall delivers its bytes at most n a Read, then calls atStall and fails as a client
// that stopped sending does when read_body_seconds runs out.
type stall struct {
	r       io.Reader
	n       int
	atStall func()
}

func (s stall) Read(p []byte) (int, error) {
	n, err := s.r.Read(p[:min(len(p), s.n)])
	if err == io.EOF {
		s.atStall()
		return 0, os.ErrDeadlineExceeded
	}
	return n, err
}

// An upload that stalls holds, and is charged, at most its first buffer or twice what it
// sent (the buffer doubles; doc.go says why not chunks), never more than its
// Content-Length, and nothing more after the stall.
func TestReadRequestBodyStalledUploadCharge(t *testing.T) {
	const limit = 8 << 20
	for _, tc := range []struct {
		name      string
		announced int64 // Content-Length, -1: chunked
		sent      int
	}{
		{"one byte of 8 MiB", limit, 1},
		{"a chunk and a byte of 8 MiB", limit, bodyChunk + 1},
		{"5 MiB and a byte of 8 MiB", limit, 5<<20 + 1},
		{"all but a byte of 100 KiB", 100 << 10, 100<<10 - 1},
		{"a byte, chunked", -1, 1},
		{"300 KiB and a byte, chunked", -1, 300<<10 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var charged, atStall int64
			src := stall{r: bytes.NewReader(bytes.Repeat([]byte("x"), tc.sent)), n: 40 << 10,
				atStall: func() { atStall = charged }}
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", src)
			r.ContentLength = tc.announced
			_, err := readRequestBody(httptest.NewRecorder(), r, limit, func(n int64) bool { charged += n; return true })
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			assert.LessOrEqual(t, atStall, max(int64(bodyChunk), 2*int64(tc.sent)))
			if tc.announced > 0 {
				assert.LessOrEqual(t, atStall, tc.announced, "never more than the Content-Length")
			}
			assert.Equal(t, atStall, charged, "nothing charged after the stall")
		})
	}
}
