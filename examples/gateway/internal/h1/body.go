package h1

import (
	"bufio"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// connReader reads the connection for the bufio.Reader: during a request's header it
// is bounded (the header limit) and feeds the Host scan; a read error while a
// request is served (its body) cancels the request's context, as net/http. hasByte is
// a byte the client-gone watch read.
type connReader struct {
	c       *conn
	limited bool
	remain  int64
	hasByte bool
	byteBuf [1]byte
}

// limitHeader bounds the reads to n bytes until endHeader.
func (cr *connReader) limitHeader(n int64) { cr.limited, cr.remain = true, n }

// endHeader lifts the bound; it reports whether it was reached.
func (cr *connReader) endHeader() bool {
	hit := cr.remain <= 0
	cr.limited = false
	return hit
}

func (cr *connReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if cr.limited {
		if cr.remain <= 0 {
			return 0, io.EOF
		}
		if int64(len(p)) > cr.remain {
			p = p[:cr.remain]
		}
	}
	if cr.hasByte {
		p[0] = cr.byteBuf[0]
		cr.hasByte = false
		cr.account(p[:1])
		return 1, nil
	}
	n, err := cr.c.rwc.Read(p)
	cr.account(p[:n])
	if err != nil && !cr.limited {
		if cancel := cr.c.cancel; cancel != nil {
			cancel(ErrClientGone)
		}
	}
	return n, err
}

// account counts (and scans) what a header read took.
func (cr *connReader) account(p []byte) {
	if cr.limited {
		cr.remain -= int64(len(p))
		cr.c.scan.feed(p)
	}
}

// connWriter writes the connection for the bufio.Writer; a failed write cancels the
// request's context with cause ErrClientGone, as net/http.
type connWriter struct{ c *conn }

func (w connWriter) Write(p []byte) (int, error) {
	n, err := w.c.rwc.Write(p)
	if err != nil && w.c.werr == nil {
		w.c.werr = err
		if cancel := w.c.cancel; cancel != nil {
			cancel(ErrClientGone)
		}
	}
	return n, err
}

// reqBody is the request body as the handler sees it: it writes "100 Continue" at the
// first read when the client expects it, notes the end (the client-gone watch may
// start then; a read deadline the handler set is cleared then), and its Close does not
// read on (what is left is discarded after the handler, bounded).
type reqBody struct {
	src    io.ReadCloser
	w      *response
	eof    atomic.Bool // read to its end (or no body): the watch may read the connection
	closed bool
	cont   bool  // Expect: 100-continue applies
	n      int64 // bytes read
}

func (b *reqBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.eof.Load() {
		return 0, io.EOF
	}
	if b.w.canContinue.Load() {
		b.w.writeContinue()
	}
	n, err := b.src.Read(p)
	b.n += int64(n)
	if err == io.EOF {
		b.ended()
	}
	return n, err
}

// ended notes the body's end.
func (b *reqBody) ended() {
	if b.w.readDeadline.CompareAndSwap(true, false) {
		_ = b.w.c.rwc.SetReadDeadline(time.Time{})
	}
	b.eof.Store(true)
}

func (b *reqBody) Close() error {
	b.closed = true
	return nil
}

// discard reads what is left of the body, up to maxPostHandlerReadBytes; false when
// more is left or the read failed (the connection cannot be reused).
func (b *reqBody) discard() bool {
	if b.eof.Load() {
		return true
	}
	if cl := b.w.req.ContentLength; cl > 0 && cl-b.n >= maxPostHandlerReadBytes {
		return false
	}
	_, err := io.CopyN(io.Discard, b.src, maxPostHandlerReadBytes+1)
	if err == io.EOF {
		b.ended()
		return true
	}
	return false
}

func getReader(r io.Reader) *bufio.Reader {
	if br, ok := readerPool.Get().(*bufio.Reader); ok {
		br.Reset(r)
		return br
	}
	return bufio.NewReaderSize(r, 4<<10)
}

func putReader(br *bufio.Reader) {
	br.Reset(nil)
	readerPool.Put(br)
}

func getWriter(w io.Writer) *bufio.Writer {
	if bw, ok := writerPool.Get().(*bufio.Writer); ok {
		bw.Reset(w)
		return bw
	}
	return bufio.NewWriterSize(w, 4<<10)
}

func putWriter(bw *bufio.Writer) {
	bw.Reset(nil)
	writerPool.Put(bw)
}
