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
