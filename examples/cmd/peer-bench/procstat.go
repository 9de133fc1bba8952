package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cpuTicks returns utime+stime (clock ticks) of the process and of its live children
// (nginx and HAProxy workers), read from /proc/<pid>/stat.
func (p *proc) cpuTicks() (uint64, error) {
	pids := append([]int{p.cmd.Process.Pid}, childPIDs(p.cmd.Process.Pid)...)
	var total uint64
	for _, pid := range pids {
		t, err := statTicks(pid)
		if err != nil {
			return 0, err
		}
		total += t
	}
	return total, nil
}

// threadCounters returns, summed over every thread of the process and of its live
// children, the context switches (voluntary and involuntary, /proc/<pid>/task/*/status)
// and the time on a CPU (/proc/<pid>/task/*/schedstat, nanoseconds: finer than the
// clock ticks of cpuTicks). Threads that exit between two readings drop out.
func (p *proc) threadCounters() (switches uint64, cpu time.Duration) {
	for _, pid := range append([]int{p.cmd.Process.Pid}, childPIDs(p.cmd.Process.Pid)...) {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
		for _, task := range tasks {
			if data, err := os.ReadFile(filepath.Join(task, "status")); err == nil {
				switches += parseSwitches(string(data))
			}
			if data, err := os.ReadFile(filepath.Join(task, "schedstat")); err == nil {
				cpu += parseSchedstat(string(data))
			}
		}
	}
	return switches, cpu
}

// parseSwitches returns voluntary_ctxt_switches + nonvoluntary_ctxt_switches of a
// /proc status file (0 for a field that is missing).
func parseSwitches(status string) uint64 {
	var n uint64
	for line := range strings.Lines(status) {
		for _, key := range [...]string{"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"} {
			if v, ok := strings.CutPrefix(line, key); ok {
				k, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				n += k
			}
		}
	}
	return n
}

// parseSchedstat returns the first field of a /proc schedstat file: time spent on a CPU
// in nanoseconds (0 if unreadable).
func parseSchedstat(s string) time.Duration {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0
	}
	ns, _ := strconv.ParseUint(f[0], 10, 64)
	return time.Duration(ns)
}

func statTicks(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which is in parentheses and may hold spaces).
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	ut, _ := strconv.ParseUint(f[11], 10, 64) // field 14: utime
	st, _ := strconv.ParseUint(f[12], 10, 64) // field 15: stime
	return ut + st, nil
}

func childPIDs(parent int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(parent) {
			out = append(out, pid)
		}
	}
	return out
}

// clockTicks is USER_HZ: 100 on every Linux this runs on.
const clockTicks = 100
