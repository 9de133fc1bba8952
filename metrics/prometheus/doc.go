// Package prometheus exports the affinity Scheduler's events as Prometheus metrics: a
// [metrics.Recorder] backed by client_golang counters, registered on a
// prometheus.Registerer the caller gives to [New]. It lives in its own nested module so
// the core module stays free of the Prometheus dependency. Import it under an alias, since
// its name collides with client_golang's:
//
//	import (
//		"github.com/prometheus/client_golang/prometheus"
//		"github.com/prometheus/client_golang/prometheus/promhttp"
//
//		"github.com/agentserve/sessionaffinity/affinity"
//		promaffinity "github.com/agentserve/sessionaffinity/metrics/prometheus"
//	)
//
//	reg := prometheus.NewRegistry()
//	rec, err := promaffinity.New(reg, promaffinity.WithTiers("interactive", "batch"))
//	if err != nil { … }                               // e.g. prometheus.AlreadyRegisteredError
//	sched, err := affinity.New(cfg, affinity.WithRecorder(rec))
//	if err != nil { … }
//	rec.ObserveBindings(sched.Len)                     // gauge read at scrape time
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// # Series
//
//	agentserve_affinity_hits_total{tier}             counter
//	agentserve_affinity_misses_total{tier}           counter
//	agentserve_affinity_broken_total{tier,reason}    counter, reason: down | unhealthy | not_candidate | overloaded
//	agentserve_affinity_evictions_total{tier}        counter
//	agentserve_affinity_prompt_tokens_total{tier}    counter (metrics.UsageRecorder: prompt tokens of affinity hits that reported cached tokens)
//	agentserve_affinity_cached_prompt_tokens_total{tier} counter (of those, served from the prefix cache)
//	agentserve_affinity_parent_placed_total{tier}    counter (first turns placed on the parent session's backend; also misses)
//	agentserve_affinity_bindings                     gauge (reads the ObserveBindings func at scrape time; 0 until set)
//	agentserve_affinity_store_errors_total{op}       counter, op: claim | rebind | refresh | forget | watch
//	                                                 (failed calls to a shared binding store, metrics.StoreRecorder)
//
// Labels carry the tier only, never a session or backend ID, and the tier label is
// bounded: with [WithTiers] only the allow-listed tiers keep their name; otherwise the
// first [WithMaxTiers] distinct tiers (default 32) do. Every other tier is counted under
// "other", and the empty tier is labelled "default". When a tier label is first created,
// all its series (including the four broken reasons) start at 0.
//
// Affinity hit rate in Grafana (PromQL), overall and by tier:
//
//	sum(rate(agentserve_affinity_hits_total[5m]))
//	  / (sum(rate(agentserve_affinity_hits_total[5m])) + sum(rate(agentserve_affinity_misses_total[5m])))
//
//	sum by (tier) (rate(agentserve_affinity_hits_total[5m]))
//	  / (sum by (tier) (rate(agentserve_affinity_hits_total[5m])) + sum by (tier) (rate(agentserve_affinity_misses_total[5m])))
//
// A ready dashboard is grafana/sessionaffinity.json next to this file (hit rate by tier,
// hits and misses, broken by reason, evictions, bindings); import it in Grafana and pick
// your Prometheus data source.
//
// # What it is not
//
// Not a metrics registry of its own, not a scraper, and it never touches
// prometheus.DefaultRegisterer: there are no package globals and no init.
//
// # Concurrency and cost
//
// A [Recorder] is safe for concurrent use. For a tier already seen, each event is one
// lock-free map lookup and one atomic add, with no allocation (see the benchmarks); a
// tier's first event takes a mutex once to create its series.
package prometheus
