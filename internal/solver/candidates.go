package solver

import (
	"fmt"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/requirements"
)

// filterCandidatesInto appends to out the candidates that can hold need and satisfy reqs on the
// changed keys (the others were checked when the candidates were chosen). out may share cands'
// array from its start: it never overtakes the candidate being read.
func (s *solver) filterCandidatesInto(out, cands []*itInfo, need vec, reqs requirements.Requirements, changed []string) []*itInfo {
	offerings := false
	keyReqs := make([]requirements.Requirement, 0, len(changed))
	for _, k := range changed {
		offeringKey := k == karpv1.ZoneLabelKey || k == karpv1.CapacityTypeLabelKey
		offerings = offerings || offeringKey
		if offeringKey && s.offerings.ok {
			// The offering mask checks the type's own requirement on the key too.
			continue
		}
		r, _ := reqs.Get(k)
		keyReqs = append(keyReqs, r)
	}
	var of offeringReqs
	var mask uint64
	if offerings {
		of = offeringFilter(reqs)
		mask = s.offerings.mask(reqs)
	}
	for _, info := range cands {
		if !need.lessEq(info.alloc) {
			continue
		}
		if len(keyReqs) > 0 && !typeAllowsKeys(info, keyReqs) {
			continue
		}
		if offerings && !s.offerings.offers(info, mask, &of) {
			continue
		}
		out = append(out, info)
	}
	return out
}

func typeAllowsKeys(info *itInfo, keyReqs []requirements.Requirement) bool {
	for i := range keyReqs {
		tr, ok := info.it.Requirements.Get(keyReqs[i].Key)
		if !ok {
			continue
		}
		if !tr.Intersects(&keyReqs[i]) {
			return false
		}
	}
	return true
}

// minValuesShortfall says which minValues the candidates fail, or "" (always "" when
// Options.MinValuesBestEffort: the claim launches with the types there are).
func (s *solver) minValuesShortfall(cands []*itInfo, reqs requirements.Requirements) string {
	if s.opts.MinValuesBestEffort {
		return ""
	}
	return minValuesShortfall(cands, reqs)
}

// minValuesShortfall says which minValues the candidates fail, or "".
func minValuesShortfall(cands []*itInfo, reqs requirements.Requirements) string {
	var msg string
	reqs.Each(func(r requirements.Requirement) {
		if r.MinValues == 0 || msg != "" {
			return
		}
		if n := typeValues(cands, r); n < r.MinValues {
			msg = fmt.Sprintf("minValues %d of %s not met: only %d value(s) among fitting instance types", r.MinValues, r.Key, n)
		}
	})
	return msg
}

// typeValues counts the distinct values of r's key, among those r allows, that the candidates'
// labels have: what minValues counts.
func typeValues(cands []*itInfo, r requirements.Requirement) int {
	seen := map[string]bool{}
	for _, info := range cands {
		if v, ok := info.typeLabels()[r.Key]; ok && r.Allows(v) {
			seen[v] = true
		}
	}
	return len(seen)
}
