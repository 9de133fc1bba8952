// Command modcheck checks that every nested module of the repository builds against the
// version of the core (and of its sibling modules) it requires, the way a user outside
// the repository builds it: with GOWORK=off and no replace directives, resolving the
// repository's modules from a file-based module proxy made from the work tree (package
// modproxy). `make modules-check` (part of `make test`) runs it.
//
// Usage:
//
//	go run ./cmd/modcheck [-root DIR] [-version vX.Y.Z] [-keep] [-proxy-only DIR] [-work]
//
// Steps: find every module (git ls-files), check that none replaces a repository module
// and that all require them at one release version (or -version), write the proxy, then
// for each nested module copy its files to a scratch directory and run `go build ./...`
// and `go vet ./...` there (vet type-checks the tests too), failing if the build needed
// a change to the module's go.mod (an incomplete go.mod would fail for a user running
// with -mod=readonly). It prints one line per module with the time taken.
//
// -work writes ROOT/go.work — every module, each replaced at the required version by its
// directory — and stops; `make work` (run by `make test`) calls it, so a new nested
// module joins the workspace without editing go.work by hand.
//
// -proxy-only DIR writes the proxy to DIR and stops (for manual `go get` experiments:
// see RELEASING.md). -keep leaves the scratch directory in place and prints its path.
// Exit status 1 on any failure, with the go command's output.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentserve/sessionaffinity/internal/tools/modproxy"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "modcheck:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("modcheck", flag.ContinueOnError)
	root := fs.String("root", ".", "repository root (a git work tree)")
	version := fs.String("version", "", "version of the repository's modules (default: the one the nested modules require)")
	keep := fs.Bool("keep", false, "keep the scratch directory")
	proxyOnly := fs.String("proxy-only", "", "write the module proxy to this directory and stop")
	work := fs.Bool("work", false, "write ROOT/go.work for every module (and report whether it changed), then stop")
	if err := fs.Parse(args); err != nil {
		return err
	}
	absRoot, err := filepath.Abs(*root)
	if err != nil {
		return err
	}
	mods, err := modproxy.Discover(absRoot)
	if err != nil {
		return err
	}
	if *work {
		return writeWork(absRoot, mods, *version, stdout)
	}
	v := *version
	if v == "" {
		v, err = modproxy.RequiredVersion(mods)
	} else {
		err = modproxy.CheckAll(mods)
	}
	if err != nil {
		return err
	}
	if *proxyOnly != "" {
		dir, err := filepath.Abs(*proxyOnly)
		if err != nil {
			return err
		}
		if err := modproxy.Write(absRoot, dir, v, mods); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "modcheck: %d modules at %s in file://%s\n", len(mods), v, filepath.ToSlash(dir))
		return nil
	}

	tmp, err := os.MkdirTemp("", "modcheck-")
	if err != nil {
		return err
	}
	if *keep {
		fmt.Fprintln(stdout, "modcheck: scratch directory", tmp)
	} else {
		defer os.RemoveAll(tmp) // the cache is writable: -modcacherw
	}
	proxy := filepath.Join(tmp, "proxy")
	if err := modproxy.Write(absRoot, proxy, v, mods); err != nil {
		return err
	}
	env, err := modproxy.Env(proxy, filepath.Join(tmp, "modcache"))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "modcheck: %d modules at %s; building each nested module with GOWORK=off against that version\n", len(mods), v)
	var failed []string
	for _, m := range mods {
		if m.Dir == "." {
			continue
		}
		start := time.Now()
		if err := checkModule(absRoot, filepath.Join(tmp, "src"), m, env); err != nil {
			fmt.Fprintf(stdout, "FAIL %s (%s)\n%v\n", m.Dir, m.Path, err)
			failed = append(failed, m.Dir)
			continue
		}
		fmt.Fprintf(stdout, "ok   %s (%s) %.1fs\n", m.Dir, m.Path, time.Since(start).Seconds())
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d nested module(s) do not build against %s: %s", len(failed), v, strings.Join(failed, ", "))
	}
	return nil
}

// writeWork writes root/go.work (see modproxy.WorkFile) and says whether it changed.
func writeWork(root string, mods []modproxy.Module, version string, stdout io.Writer) error {
	if version == "" {
		var err error
		if version, err = modproxy.WorkVersion(mods); err != nil {
			return err
		}
	}
	name := filepath.Join(root, "go.work")
	old, _ := os.ReadFile(name)
	data := modproxy.WorkFile(mods, version)
	if bytes.Equal(old, data) {
		return nil
	}
	if err := os.WriteFile(name, data, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "modcheck: go.work updated (%d modules, replaces at %s): commit it\n", len(mods), version)
	return nil
}

// checkModule copies m's files under src and builds and vets it there with env.
func checkModule(root, src string, m modproxy.Module, env []string) error {
	dir := filepath.Join(src, filepath.FromSlash(m.Dir))
	for _, f := range m.Files {
		if err := copyFile(filepath.Join(root, filepath.FromSlash(m.Dir), filepath.FromSlash(f)), filepath.Join(dir, filepath.FromSlash(f))); err != nil {
			return err
		}
	}
	for _, args := range [][]string{{"build", "./..."}, {"vet", "./..."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	after, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	if !bytes.Equal(after, m.GoMod) {
		return fmt.Errorf("go.mod is incomplete against the released versions; the build changed it to:\n%s", after)
	}
	return nil
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o644)
}
