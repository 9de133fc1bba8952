package main

import (
	"errors"
	"fmt"
	"io/fs"
)

// Where the default trace comes from (see ../../shared/traces/README.md next to the
// repository): the "conversation" workload of the Mooncake FAST'25 trace release,
// Apache-2.0. `make trace` at the repository root downloads it to the default -trace
// path and checks this SHA-256.
const (
	traceRepo   = "github.com/kvcache-ai/Mooncake"
	traceCommit = "3b5a594133958449a1feaf1c9e0fc1b553e34a28"
	tracePath   = "FAST25-release/traces/conversation_trace.jsonl"
	traceURL    = "https://raw.githubusercontent.com/kvcache-ai/Mooncake/" + traceCommit + "/" + tracePath
	traceSHA256 = "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df"
)

// missingTrace explains, for a trace file that does not exist, how to get it; other
// errors are returned unchanged.
func missingTrace(path string, err error) error {
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return fmt.Errorf("trace not found: %w\n\n"+
		"The default trace is the Mooncake FAST'25 conversation trace (%s, %s at commit %s,\n"+
		"Apache-2.0; 12,031 requests, ~3 MB). Get it with\n\n"+
		"\tmake trace      # from the repository root: downloads it to ../shared/traces/ and checks its SHA-256\n\n"+
		"or download %s\n"+
		"yourself (sha256 %s) and pass -trace PATH (now %q).",
		err, traceRepo, tracePath, traceCommit, traceURL, traceSHA256, path)
}
