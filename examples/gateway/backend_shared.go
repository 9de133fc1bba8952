package gateway

import (
	"net/url"
	"slices"
	"strings"
)

// sharedURLs lists the backends of backends that name the same server: the same URL once
// its scheme and host are lowercased and a trailing "/" is dropped. Each entry is
// "id1,id2 -> url" (the URL as the first one spells it; validation refuses
// user:password@, so it holds no secret), in the order the first of each group is
// configured; nil when every URL is distinct. Cost: O(backends).
//
// Decision: such a config is accepted with a warning, not refused (tester51, tester52).
// Two IDs on one server give it two HRW shares, two probes and two load counts; that
// can be meant (HAProxy and nginx accept a server listed twice, a crude weight), but
// weight is the knob for it, and a copy-paste slip is far likelier.
func sharedURLs(backends []BackendConfig) []string {
	type group struct {
		ids   []string
		shown string
	}
	byURL := map[string]*group{}
	var order []string
	for _, b := range backends {
		key := b.URL
		if u, err := url.Parse(b.URL); err == nil {
			u.Scheme, u.Host = strings.ToLower(u.Scheme), strings.ToLower(u.Host)
			u.Path = strings.TrimSuffix(u.Path, "/")
			key = u.String()
		}
		g := byURL[key]
		if g == nil {
			g = &group{shown: b.URL}
			byURL[key] = g
			order = append(order, key)
		}
		g.ids = append(g.ids, b.ID)
	}
	var out []string
	for _, k := range order {
		if g := byURL[k]; len(g.ids) > 1 {
			out = append(out, strings.Join(g.ids, ",")+" -> "+g.shown)
		}
	}
	return out
}

// warnSharedURLs logs sharedURLs of backends at Warn; on a reload (reload true, old the
// backends before it) only when the list changed, so that it is said once, not at every
// reload of a file that keeps it.
func (g *Gateway) warnSharedURLs(reload bool, old, backends []BackendConfig) {
	shared := sharedURLs(backends)
	if len(shared) == 0 || reload && slices.Equal(shared, sharedURLs(old)) {
		return
	}
	g.log.Warn("backends share a URL: each ID is a backend of its own to the gateway (its own HRW share, "+
		"probes and load), so that server gets a share per ID; use one ID and its weight instead",
		"shared", logList(shared))
}
