package awsfake

import (
	"io"
	"net/http"
	"slices"
	"strings"
)

const iamNS = "https://iam.amazonaws.com/doc/2010-05-08/"

func (s *Server) iam(w http.ResponseWriter, action string, f form) {
	s.mu.Lock()
	var res *el
	var err *apiError
	switch action {
	case "GetInstanceProfile":
		p := s.profiles[f.Str("InstanceProfileName")]
		if p == nil {
			err = errorf("NoSuchEntity", "Instance Profile %s cannot be found.", f.Str("InstanceProfileName"))
			break
		}
		res = E("", E("InstanceProfile", s.profileXML(p).kids...))
	case "CreateInstanceProfile":
		name := f.Str("InstanceProfileName")
		if s.profiles[name] != nil {
			err = errorf("EntityAlreadyExists", "Instance Profile %s already exists.", name)
			break
		}
		path := f.Str("Path")
		if path == "" {
			path = "/"
		}
		p := &InstanceProfile{Name: name, Path: path, ID: "AIPA" + strings.ToUpper(newID(""))[:16], Tags: map[string]string{}}
		for _, t := range f.Each("Tags.member") {
			p.Tags[t.Str("Key")] = t.Str("Value")
		}
		s.profiles[name] = p
		res = E("", E("InstanceProfile", s.profileXML(p).kids...))
	case "AddRoleToInstanceProfile":
		p, role := s.profiles[f.Str("InstanceProfileName")], f.Str("RoleName")
		switch {
		case p == nil:
			err = errorf("NoSuchEntity", "Instance Profile %s cannot be found.", f.Str("InstanceProfileName"))
		case !s.roles[role]:
			err = errorf("NoSuchEntity", "The role with name %s cannot be found.", role)
		case len(p.Roles) > 0:
			err = errorf("LimitExceeded", "Cannot exceed quota for InstanceSessionsPerInstanceProfile: 1")
		default:
			p.Roles = append(p.Roles, role)
			res = E("")
		}
	case "RemoveRoleFromInstanceProfile":
		p := s.profiles[f.Str("InstanceProfileName")]
		if p == nil || !slices.Contains(p.Roles, f.Str("RoleName")) {
			err = errorf("NoSuchEntity", "Instance Profile %s has no role %s.", f.Str("InstanceProfileName"), f.Str("RoleName"))
			break
		}
		p.Roles = slices.DeleteFunc(p.Roles, func(r string) bool { return r == f.Str("RoleName") })
		res = E("")
	case "DeleteInstanceProfile":
		p := s.profiles[f.Str("InstanceProfileName")]
		switch {
		case p == nil:
			err = errorf("NoSuchEntity", "Instance Profile %s cannot be found.", f.Str("InstanceProfileName"))
		case len(p.Roles) > 0:
			err = errorf("DeleteConflict", "Cannot delete entity, must remove roles from instance profile first.")
		default:
			delete(s.profiles, p.Name)
			res = E("")
		}
	case "TagInstanceProfile":
		p := s.profiles[f.Str("InstanceProfileName")]
		if p == nil {
			err = errorf("NoSuchEntity", "Instance Profile %s cannot be found.", f.Str("InstanceProfileName"))
			break
		}
		for _, t := range f.Each("Tags.member") {
			p.Tags[t.Str("Key")] = t.Str("Value")
		}
		res = E("")
	default:
		err = errorf("InvalidAction", "Could not find operation %s for version 2010-05-08", action)
	}
	s.mu.Unlock()
	if err != nil {
		s.writeError(w, "iam", err.Fault)
		return
	}
	root := E(action+"Response", E(action+"Result", res.kids...), E("ResponseMetadata", T("RequestId", newID(""))))
	w.Header().Set("Content-Type", "text/xml")
	_, _ = io.WriteString(w, render(root, iamNS))
}

func (s *Server) profileXML(p *InstanceProfile) *el {
	var roles []*el
	for _, r := range p.Roles {
		roles = append(roles, E("", T("RoleName", r), T("RoleId", "AROA"+strings.ToUpper(r)), T("Path", "/"),
			T("Arn", "arn:aws:iam::"+s.account+":role/"+r), T("CreateDate", "2026-01-01T00:00:00Z")))
	}
	var tags []*el
	for _, k := range sortedKeys(p.Tags) {
		tags = append(tags, E("", T("Key", k), T("Value", p.Tags[k])))
	}
	return E("", T("InstanceProfileName", p.Name), T("InstanceProfileId", p.ID), T("Path", p.Path),
		T("Arn", "arn:aws:iam::"+s.account+":instance-profile"+p.Path+p.Name), T("CreateDate", "2026-01-01T00:00:00Z"),
		Members("Roles", roles), Members("Tags", tags))
}
