// Package rawio wraps TCP connections so that their reads and writes enter the kernel
// without the Go runtime's system-call bookkeeping, and their deadlines move the
// runtime's timers only when they must.
//
// Every read and write of a net.Conn is a system call that the runtime brackets with
// entersyscall and exitsyscall, in case it blocks. When every P was idle just before
// (a proxy at low concurrency, between requests), entersyscall also wakes the runtime's
// monitor thread (sysmon) from its wait, and sysmon then polls every 20 µs until the Ps are
// idle again: measured on the example gateway at concurrency 1, 3.3 of its 6.2 context
// switches per request were sysmon's, and the gateway used a quarter more CPU than
// without them (see docs/peers.md). A socket the network poller manages is non-blocking,
// so its read and write never block: rawio issues them with syscall.RawSyscall, which
// skips the bracket, and still waits for readiness in the poller through
// [syscall.RawConn], so deadlines, Close and the goroutine scheduling are net's own.
// The runtime's side of this is discussed in golang/go#29734 (a system call variant for
// calls known not to block) and golang/go#18236 (sysmon's fixed tick).
//
// Deadlines cost the runtime too: each SetReadDeadline or SetWriteDeadline moves a
// runtime timer, and one that becomes its P's earliest wakes an idle thread to watch it
// (runtime.wakeNetPoller) — a server that sets an idle, a header and a body deadline per
// request pays that several times per request (in a profile of the example gateway at
// concurrency 1, 423 of 881 samples in runtime.wakep came from deadline setters). A wrapped
// connection passes a deadline to the poller only when it is earlier than the one
// already armed (or none is): a deadline moved later or cleared leaves the armed one in
// place, and the early wake-up it may cause is absorbed — Read and Write, seeing the
// poller's timeout while the caller's deadline has not passed, arm the caller's
// deadline and carry on (a Write from the bytes it had written). So callers see net's
// semantics: a Read or Write fails with os.ErrDeadlineExceeded at the deadline last
// set, not before; a deadline set earlier, or in the past, interrupts a blocked call at
// once. ReadFrom and WriteTo are the *net.TCPConn's (splice), which cannot absorb: while
// one runs, its direction's deadlines go to the poller eagerly, the caller's first.
//
// Only Linux *net.TCPConn connections are wrapped; [Wrap] returns any other connection,
// and every connection on other systems, unchanged. A wrapped connection reports its
// errors the way net does (*net.OpError with Op "read" or "write", wrapping
// os.ErrDeadlineExceeded, net.ErrClosed or an *os.SyscallError), so callers matching
// errors with errors.Is or net.Error see no difference. What it gives up: a read or
// write cannot be preempted while in the kernel (a non-blocking socket call copies at
// most its socket buffer, a few microseconds). Under the race detector (the race build
// tag) reads and writes are plain system calls again, so that the detector sees the
// happens-before edge from a write to the read of its bytes, as it does for net's own.
package rawio
