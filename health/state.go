package health

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrUnknownState is returned (wrapped with the offending text) by [ParseState] and
// [State.UnmarshalText] for text that names no State.
var ErrUnknownState = errors.New("health: unknown state")

// State is the health of one backend. The zero value is Healthy, which is also the state
// of any ID a [Set] has never been told about.
type State uint8

const (
	// Healthy: the backend takes existing and new sessions. The zero value.
	Healthy State = iota
	// Draining: the backend keeps its existing sessions but should take no new ones.
	Draining
	// Down: the backend takes nothing; sessions bound to it must move.
	Down
)

// String returns "healthy", "draining" or "down" ("State(n)" for an invalid value).
// It does not allocate for valid values.
func (s State) String() string {
	switch s {
	case Healthy:
		return "healthy"
	case Draining:
		return "draining"
	case Down:
		return "down"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Valid reports whether s is Healthy, Draining or Down.
func (s State) Valid() bool { return s <= Down }

// ParseState parses the String form of a State, ignoring ASCII case and surrounding
// spaces: "healthy", "draining" or "down". Anything else returns Healthy and an error
// wrapping [ErrUnknownState] with the text. 0 allocs on success.
func ParseState(text string) (State, error) {
	t := strings.TrimSpace(text)
	for _, s := range [...]State{Healthy, Draining, Down} {
		if strings.EqualFold(t, s.String()) {
			return s, nil
		}
	}
	return Healthy, fmt.Errorf("%w: %q (want healthy, draining or down)", ErrUnknownState, text)
}

// MarshalText implements encoding.TextMarshaler (so States read well in JSON/YAML).
// An invalid State is an error wrapping [ErrUnknownState].
func (s State) MarshalText() ([]byte, error) {
	if !s.Valid() {
		return nil, fmt.Errorf("%w: %d", ErrUnknownState, uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with [ParseState].
func (s *State) UnmarshalText(text []byte) error {
	v, err := ParseState(string(text))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Transition is one change of a backend's State, as delivered to subscribers of a [Set]
// and observers of a [Prober]. From != To always holds for delivered transitions.
type Transition struct {
	ID   string // the backend ID
	From State  // the state before the change
	To   State  // the state after the change; never equal to From
}

// String renders t as "id: from -> to", e.g. "b1: healthy -> down".
func (t Transition) String() string {
	return t.ID + ": " + t.From.String() + " -> " + t.To.String()
}
