// Package e2e holds the end-to-end tests of the example gateway: real HTTP through
// gateway.Gateway to fakevllm simulators, metrics read back from /metrics with the
// Prometheus text parser. It has no non-test code.
package e2e
