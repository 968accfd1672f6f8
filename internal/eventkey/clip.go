package eventkey

import (
	"fmt"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// MaxNote is the longest note the events API stores (1 KiB): the API server refuses a longer
// event, and the recorder only logs it.
const MaxNote = 1024

// Clip cuts a message to MaxNote bytes on a character boundary, ending it with "…".
func Clip(msg string) string {
	if len(msg) <= MaxNote {
		return msg
	}
	cut := MaxNote - len("…")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

// Clipping returns a recorder whose events' notes are clipped to MaxNote, so that a long message
// (a command over many nodes, a reason naming every NodePool) still reaches the object.
func Clipping(r events.EventRecorder) events.EventRecorder { return clipping{r} }

type clipping struct{ events.EventRecorder }

func (c clipping) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	c.EventRecorder.Eventf(regarding, related, eventtype, reason, action, "%s", Clip(fmt.Sprintf(note, args...)))
}
