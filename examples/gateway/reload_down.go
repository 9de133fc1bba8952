package gateway

import "slices"

// maxGoneDown bounds goneDown: the backends remembered as removed while Down. A fleet
// that churns backend IDs forgets the oldest first.
const maxGoneDown = 256

// goneDown remembers the backends a reload removed while the active health check held
// them Down, by ID and URL, so that a later reload adding one back with the same URL (a
// configuration rolled back) holds it Down until it passes success_threshold probes, as
// if it had never left, instead of sending it traffic at once. Oldest first; at most
// maxGoneDown. Not safe for concurrent use: guarded by Gateway.reloadMu.
type goneDown struct{ ids, urls []string }

// has reports whether id was removed while Down with this url. O(entries).
func (d *goneDown) has(id, url string) bool {
	i := slices.Index(d.ids, id)
	return i >= 0 && d.urls[i] == url
}

// add remembers id (its latest removal replaces an earlier one), forgetting the oldest
// entry beyond maxGoneDown.
func (d *goneDown) add(id, url string) {
	d.remove(id)
	d.ids, d.urls = append(d.ids, id), append(d.urls, url)
	if len(d.ids) > maxGoneDown {
		d.ids, d.urls = slices.Delete(d.ids, 0, 1), slices.Delete(d.urls, 0, 1)
	}
}

// remove forgets id (added back, whatever its URL).
func (d *goneDown) remove(id string) {
	if i := slices.Index(d.ids, id); i >= 0 {
		d.ids, d.urls = slices.Delete(d.ids, i, i+1), slices.Delete(d.urls, i, i+1)
	}
}
