package affinity

import (
	"fmt"
	"sync"
	"testing"
)

// TestLoadTableGrowsByDoubling: first sights of n backends cost O(n) allocations (one
// load record each, plus the O(log n) doublings of the index), not a copy of the whole
// index per new backend (4n allocations and O(n²) bytes: tester36 measured 2 s for the
// first Acquire over 8,000 new candidates). Every backend stays found after the index
// grew past it.
func TestLoadTableGrowsByDoubling(t *testing.T) {
	const n = 4096
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("backend-%d", i)
	}
	var tab *loadTable
	allocs := testing.AllocsPerRun(1, func() {
		tab = &loadTable{}
		for _, id := range ids {
			tab.get(id, hashID(id))
		}
	})
	if limit := float64(n + 64); allocs > limit {
		t.Errorf("%d first sights: %v allocations, want at most %v (one per backend plus the index's doublings)", n, allocs, limit)
	}
	seen := make(map[*backendLoad]bool, n)
	for _, id := range ids {
		b := tab.lookup(id)
		if b == nil || b.id != id {
			t.Fatalf("lookup(%q) = %v after the index grew", id, b)
		}
		if seen[b] {
			t.Fatalf("lookup(%q): a load record shared with another backend", id)
		}
		seen[b] = true
		if again := tab.get(id, hashID(id)); again != b {
			t.Fatalf("get(%q) created a second record", id)
		}
	}
}

// TestLoadTableConcurrentFirstSights: readers that look backends up while writers add new
// ones (and the index doubles under them) never see a torn slot, and every backend has
// exactly one load record at the end (-race checks the slot protocol).
func TestLoadTableConcurrentFirstSights(t *testing.T) {
	const writers, per = 4, 500
	tab := &loadTable{}
	var wg sync.WaitGroup
	got := make([][]*backendLoad, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				// Writers overlap: writer w adds IDs w*per/2 ... so half are shared.
				id := fmt.Sprintf("b-%d", w*per/2+i)
				b := tab.get(id, hashID(id))
				if b.id != id {
					t.Errorf("get(%q) returned the record of %q", id, b.id)
					return
				}
				got[w] = append(got[w], b)
				if r := tab.lookup(id); r != b {
					t.Errorf("lookup(%q) after get: %p, want %p", id, r, b)
					return
				}
			}
		}()
	}
	wg.Wait()
	for w := range writers {
		for i, b := range got[w] {
			id := fmt.Sprintf("b-%d", w*per/2+i)
			if r := tab.lookup(id); r != b {
				t.Fatalf("%q has two load records", id)
			}
		}
	}
}
