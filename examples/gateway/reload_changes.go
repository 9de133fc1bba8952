package gateway

import (
	"strconv"
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
