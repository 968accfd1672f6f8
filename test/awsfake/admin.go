package awsfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// AdminPrefix is the path of the fake's own controls (no signature): drills and inspection for
// people running it locally.
const AdminPrefix = "/_awsfake/"

func (s *Server) admin(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	switch r.URL.Path[len(AdminPrefix):] {
	case "interrupt-spot":
		if err := s.InterruptSpot(q.Get("instance"), q.Get("queue")); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "sent a Spot interruption warning for %s to %s; it terminates in %s\n", q.Get("instance"), q.Get("queue"), SpotInterruptionWarningNotice)
	case "insufficient-capacity":
		short, err := strconv.ParseBool(q.Get("short"))
		if err != nil {
			http.Error(w, "short: "+err.Error(), http.StatusBadRequest)
			return
		}
		s.SetInsufficientCapacity(q.Get("type"), q.Get("zone"), q.Get("lifecycle"), short)
		fmt.Fprintln(w, "ok")
	case "send":
		id, err := s.SendEvent(q.Get("queue"), q.Get("event"), q.Get("instance"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"ID": id})
	case "instances":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Instances())
	case "messages":
		msgs := s.Messages(q.Get("queue"))
		if msgs == nil {
			http.Error(w, "no queue "+strconv.Quote(q.Get("queue")), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(msgs)
	default:
		http.Error(w, "unknown control; try interrupt-spot?instance=&queue=, send?queue=&event=&instance=, insufficient-capacity?type=&zone=&lifecycle=&short=, instances, messages?queue=", http.StatusNotFound)
	}
}
