package disruptionplan

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule is a parsed budget schedule: a standard five-field cron expression (minute, hour, day
// of month, month, day of week) or one of the @ macros, read in UTC, as Karpenter reads a
// budget's schedule (with the same library, github.com/robfig/cron).
type Schedule struct {
	spec *cron.SpecSchedule
}

// cronFields names the five fields, for errors.
var cronFields = [5]string{"minute", "hour", "day of month", "month", "day of week"}

// ParseSchedule parses a cron expression; the error names the field and value it could not read.
// Time-zone prefixes (CRON_TZ=, TZ=) and "@every" are refused: a budget's schedule is in UTC, and
// Karpenter's NodePool validation admits neither.
func ParseSchedule(expr string) (*Schedule, error) {
	s := strings.TrimSpace(expr)
	if strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ=") {
		return nil, fmt.Errorf("schedule %q: a budget's schedule is read in UTC; a time-zone prefix is not supported", expr)
	}
	if strings.HasPrefix(s, "@") {
		s = strings.ToLower(s)
		if strings.HasPrefix(s, "@every") {
			return nil, fmt.Errorf("schedule %q: want a cron expression or one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly", expr)
		}
	} else if fields := strings.Fields(s); len(fields) != 5 {
		return nil, fmt.Errorf("schedule %q: want 5 fields (minute hour day-of-month month day-of-week) or a macro, got %d", expr, len(fields))
	}
	parsed, err := cron.ParseStandard(s)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", expr, fieldError(s, err))
	}
	spec, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("schedule %q: not a calendar schedule", expr)
	}
	spec.Location = time.UTC
	return &Schedule{spec: spec}, nil
}

// fieldError names the field of a five-field expression that the library refused, by parsing
// each field on its own; the library's own error says what is wrong with it.
func fieldError(s string, err error) error {
	fields := strings.Fields(s)
	if len(fields) != 5 {
		return err
	}
	for i, f := range fields {
		probe := []string{"*", "*", "*", "*", "*"}
		probe[i] = f
		if _, ferr := cron.ParseStandard(strings.Join(probe, " ")); ferr != nil {
			return fmt.Errorf("%s field %q: %w", cronFields[i], f, ferr)
		}
	}
	return err
}

// Next is the first minute strictly after t (in UTC) that the schedule matches, or the zero time
// when none comes within five years (a schedule such as "0 0 30 2 *").
func (s *Schedule) Next(t time.Time) time.Time {
	next := s.spec.Next(t.UTC())
	if next.IsZero() {
		return next
	}
	return next.UTC()
}

// ActiveWindow reports whether a window of length d opened by the schedule contains now, and
// when that window ends: windows are [hit, hit+d).
func (s *Schedule) ActiveWindow(now time.Time, d time.Duration) (bool, time.Time) {
	hit := s.Next(now.Add(-d))
	if hit.IsZero() || hit.After(now) {
		return false, time.Time{}
	}
	// Later hits inside the window extend it (an hourly schedule with a two-hour duration never
	// closes); look a bounded number of hits ahead.
	end := hit.Add(d)
	for range 1000 {
		next := s.Next(hit)
		if next.IsZero() || next.After(end) {
			return true, end
		}
		hit, end = next, next.Add(d)
	}
	return true, end
}
