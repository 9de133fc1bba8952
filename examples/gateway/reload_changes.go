package gateway

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// defaultTierLabel stands for the default pool (tier "") in the reload log's tier_changed.
const defaultTierLabel = "(default)"

// backendChanges lists, for the "config reloaded" log line, how each backend that both
// old and rt configure changed, in rt's configuration order: its effective HRW weight
// ("id:1->2"), its tier ("id:(default)->large") and its URL ("id:old->new"; redacted
// as url.URL.Redacted does, though config validation refuses user:password@ already). Each is nil when nothing changed (logged as
// added/removed are). A drain change is logged apart (drained, undrained). Cost:
// O(backends).
func backendChanges(old, rt *routing) (weights, tiers, urls []string) {
	for _, b := range rt.backends {
		ob := old.byID[b.id]
		if ob == nil {
			continue
		}
		if ow, nw := ob.ab.Weight(), b.ab.Weight(); ow != nw {
			weights = append(weights, b.id+":"+formatWeight(ow)+"->"+formatWeight(nw))
		}
		if ob.tier != b.tier {
			tiers = append(tiers, b.id+":"+tierLabel(ob.tier)+"->"+tierLabel(b.tier))
		}
		if ou, nu := ob.url.String(), b.url.String(); ou != nu {
			urls = append(urls, b.id+":"+ob.url.Redacted()+"->"+b.url.Redacted())
		}
	}
	return weights, tiers, urls
}

func formatWeight(w float64) string { return strconv.FormatFloat(w, 'g', -1, 64) }

func tierLabel(tier string) string {
	if tier == "" {
		return defaultTierLabel
	}
	return tier
}

// logListMax is the most IDs (or changes) a list in the "config reloaded" line names;
// longer lists end with an entry "+N more". Decision: a reload that replaces thousands of
// backends (pod churn) logged every ID, up to 56 KB in one line (tester37); the counts
// and the first names say what happened, and GET /readyz or the config says the rest.
const logListMax = 20

// logList returns ids for a log line: at most logListMax of them, then "+N more".
func logList(ids []string) []string {
	if len(ids) <= logListMax {
		return ids
	}
	return append(ids[:logListMax:logListMax], "+"+strconv.Itoa(len(ids)-logListMax)+" more")
}

// restartOnly returns an error wrapping [ErrReloadNeedsRestart] when next changes a
// setting that cannot change in place: the listen addresses, the metrics exporter, the
// store block, or a setting the listener, the server or the backend transport were built
// with. The message lists every such change, not the first alone (tester52: fixing one
// per attempt and reloading again), and says that the reload applied nothing.
func restartOnly(old, next Config) error {
	var changed []string
	add := func(format string, args ...any) { changed = append(changed, fmt.Sprintf(format, args...)) }
	if next.Listen != old.Listen {
		add("listen %q -> %q", old.Listen, next.Listen)
	}
	if next.AdminListen != old.AdminListen {
		add("admin_listen %q -> %q", old.AdminListen, next.AdminListen)
	}
	if next.Metrics != old.Metrics {
		add("metrics.exporter %q -> %q", orDefault(old.Metrics.Exporter, ExporterPrometheus), orDefault(next.Metrics.Exporter, ExporterPrometheus))
	}
	if isDirect(old.BackendClient) != isDirect(next.BackendClient) {
		add("backend_client %q -> %q", orDefault(old.BackendClient, BackendClientDirect), orDefault(next.BackendClient, BackendClientDirect))
	}
	if isDirectServer(old.Server) != isDirectServer(next.Server) {
		add("server %q -> %q", orDefault(old.Server, ServerNetHTTP), orDefault(next.Server, ServerNetHTTP))
	}
	for _, f := range []struct {
		name      string
		was, will float64
	}{
		{"timeouts.dial_seconds", old.Timeouts.DialSeconds, next.Timeouts.DialSeconds},
		{"timeouts.backend_idle_conn_seconds", old.Timeouts.BackendIdleConnSeconds, next.Timeouts.BackendIdleConnSeconds},
		{"timeouts.read_header_seconds", old.Timeouts.ReadHeaderSeconds, next.Timeouts.ReadHeaderSeconds},
		{"timeouts.client_idle_seconds", old.Timeouts.ClientIdleSeconds, next.Timeouts.ClientIdleSeconds},
		{"limits.max_header_bytes", float64(old.Limits.MaxHeaderBytes), float64(next.Limits.MaxHeaderBytes)},
		{"limits.max_connections", float64(old.Limits.MaxConnections), float64(next.Limits.MaxConnections)},
	} {
		if f.was != f.will {
			add("%s %v -> %v", f.name, f.was, f.will)
		}
	}
	if !reflect.DeepEqual(old.Store, next.Store) {
		add("store")
	}
	if len(changed) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s (nothing of this reload was applied; restart to change these, or revert them to reload the rest)",
		ErrReloadNeedsRestart, strings.Join(changed, "; "))
}
