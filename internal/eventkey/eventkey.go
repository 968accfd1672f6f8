// Package eventkey makes events whose message carries the news distinct events. The events API
// recorder (k8s.io/client-go/tools/events, which controller-runtime's managers hand out) merges
// events with the same type, reason and action on one object into a series for six minutes and
// keeps the first message: a pod whose scheduling failure changes reason, or a drain blocked by
// one pod and then another, would go on showing the first message for as long as the events keep
// coming. Action gives each message an action of its own, so a repeat still joins its series
// and a new message starts one.
package eventkey

import (
	"fmt"
	"hash/fnv"
)

// Action is base followed by a short hash of the message ("Schedule/3f2a9c1d"). Fields of the
// message that change on every repeat (times, counts) defeat it: keep them out of messages.
func Action(base, message string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(message))
	return fmt.Sprintf("%s/%08x", base, h.Sum32())
}
