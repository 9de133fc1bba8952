package gateway

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestGoneDown(t *testing.T) {
	var d goneDown
	assert.False(t, d.has("a", "u"), "empty")
	d.add("a", "u1")
	d.add("a", "u2")
	assert.False(t, d.has("a", "u1"), "the latest removal's URL replaces the earlier one")
	assert.True(t, d.has("a", "u2"))
	d.remove("a")
	assert.False(t, d.has("a", "u2"))
	for i := range maxGoneDown + 1 {
		d.add(fmt.Sprint("b", i), "u")
	}
	assert.Len(t, d.ids, maxGoneDown, "bounded")
	assert.False(t, d.has("b0", "u"), "the oldest forgotten first")
	assert.True(t, d.has("b1", "u"))
	assert.True(t, d.has(fmt.Sprint("b", maxGoneDown), "u"))
}
