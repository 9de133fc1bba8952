// Package modproxy turns this repository's work tree into a file-based Go module proxy
// (GOPROXY=file:///dir, the layout of the GOPROXY protocol: <path>/@v/list, .info, .mod,
// .zip) holding every module at one version, so that the nested modules and a scratch
// consumer can be built exactly as users will build them — with GOWORK=off and real
// version requirements — before anything is tagged or published.
//
// It is repository tooling (module github.com/agentserve/sessionaffinity/internal/tools,
// never released), used by `make modules-check` through cmd/modcheck and by the consumer
// test of this package. It also enforces the multi-module rules of RELEASING.md:
// [Module.Check] rejects replace directives of repository modules ([ErrLocalReplace]) and
// placeholder or pseudo-version requirements ([ErrPlaceholder]); [RequiredVersion]
// rejects modules that disagree on the version ([ErrVersionMismatch]).
//
// Files come from git (tracked, plus untracked files .gitignore does not exclude), so a
// zip holds what a tag of the current tree would hold, uncommitted edits included.
//
// Usage sketch:
//
//	mods, err := modproxy.Discover(root)
//	version, err := modproxy.RequiredVersion(mods) // e.g. v0.2.0
//	err = modproxy.Write(root, dir, version, mods)
//	// GOWORK=off GOPROXY=file://$dir,<fallbacks> GONOSUMDB=github.com/agentserve/sessionaffinity go get ...
//
// Not safe for concurrent Write calls to one directory; no globals, no goroutines.
package modproxy
