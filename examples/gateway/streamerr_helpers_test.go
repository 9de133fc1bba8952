package gateway_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// errorEventHead starts the error event the gateway ends a cut event stream with.
const errorEventHead = "event: error\ndata: "

// splitErrorEvent splits the body of an event stream the gateway cut into what came
// before its error event (with the line ends the gateway added to end an open event)
// and the event's code and message. It fails t unless the event is there once, last,
// whole, in the documented shape.
func splitErrorEvent(t *testing.T, body string) (before, code, msg string) {
	t.Helper()
	i := strings.LastIndex(body, errorEventHead)
	require.GreaterOrEqual(t, i, 0, "no error event in %q", body)
	require.Equal(t, i, strings.Index(body, errorEventHead), "one error event: %q", body)
	data, ok := strings.CutSuffix(body[i+len(errorEventHead):], "\n\n")
	require.True(t, ok, "the event ends the body, with its blank line: %q", body)
	require.NotContains(t, data, "\n", "one data line: %q", body)
	var ev struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(data), &ev), data)
	require.Equal(t, "error", ev.Type, data)
	require.Equal(t, "server_error", ev.Error.Type, data)
	require.NotEmpty(t, ev.Error.Message, data)
	return body[:i], ev.Error.Code, ev.Error.Message
}
