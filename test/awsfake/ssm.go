package awsfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

const awsJSON11 = "application/x-amz-json-1.1"

func (s *Server) ssm(w http.ResponseWriter, action string, body []byte) {
	var in struct {
		Name  string
		Names []string
	}
	if err := json.Unmarshal(body, &in); err != nil {
		s.writeError(w, "ssm", Fault{Code: "ValidationException", Message: err.Error()})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	param := func(name string) map[string]any {
		return map[string]any{"Name": name, "Value": s.params[name], "Type": "String", "Version": 1, "DataType": "text",
			"ARN": fmt.Sprintf("arn:aws:ssm:%s::parameter%s", s.region, name)}
	}
	switch action {
	case "GetParameter":
		if _, ok := s.params[in.Name]; !ok {
			s.writeError(w, "ssm", Fault{Code: "ParameterNotFound", Message: "Parameter " + in.Name + " not found."})
			return
		}
		writeJSON(w, awsJSON11, map[string]any{"Parameter": param(in.Name)})
	case "GetParameters":
		var found []map[string]any
		invalid := []string{}
		for _, n := range in.Names {
			if _, ok := s.params[n]; ok {
				found = append(found, param(n))
			} else {
				invalid = append(invalid, n)
			}
		}
		writeJSON(w, awsJSON11, map[string]any{"Parameters": found, "InvalidParameters": invalid})
	default:
		s.writeError(w, "ssm", Fault{Code: "UnknownOperationException", Message: "operation " + action + " is not served here"})
	}
}

func (s *Server) pricing(w http.ResponseWriter, action string, body []byte) {
	if action != "GetProducts" {
		s.writeError(w, "pricing", Fault{Code: "UnknownOperationException", Message: "operation " + action + " is not served here"})
		return
	}
	var in struct {
		ServiceCode string
		Filters     []struct{ Field, Type, Value string }
		NextToken   string
		MaxResults  int
	}
	if err := json.Unmarshal(body, &in); err != nil {
		s.writeError(w, "pricing", Fault{Code: "InvalidParameterException", Message: err.Error()})
		return
	}
	if in.ServiceCode != "AmazonEC2" {
		writeJSON(w, awsJSON11, map[string]any{"FormatVersion": "aws_v1", "PriceList": []string{}})
		return
	}
	want := map[string]string{}
	for _, f := range in.Filters {
		want[f.Field] = f.Value
	}
	s.mu.Lock()
	var list []string
	names := make([]string, 0, len(s.types))
	byName := map[string]*instanceType{}
	for _, it := range s.types {
		names = append(names, it.name)
		byName[it.name] = it
	}
	sort.Strings(names)
	for _, n := range names {
		it := byName[n]
		attrs := map[string]string{"instanceType": it.name, "regionCode": s.region, "operatingSystem": "Linux", "tenancy": "Shared",
			"preInstalledSw": "NA", "capacitystatus": "Used", "marketoption": "OnDemand", "servicecode": "AmazonEC2",
			"vcpu": strconv.FormatInt(it.vcpus, 10), "licenseModel": "No License required"}
		ok := true
		for k, v := range want {
			if a, has := attrs[k]; has && !strings.EqualFold(a, v) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		doc := map[string]any{
			"product": map[string]any{"productFamily": "Compute Instance", "attributes": attrs, "sku": "SKU" + strings.ToUpper(strings.ReplaceAll(it.name, ".", ""))},
			"terms": map[string]any{"OnDemand": map[string]any{"SKU.JRTCKXETXF": map[string]any{
				"offerTermCode": "JRTCKXETXF",
				"priceDimensions": map[string]any{"SKU.JRTCKXETXF.6YS6EN2CT7": map[string]any{
					"unit": "Hrs", "pricePerUnit": map[string]string{"USD": strconv.FormatFloat(it.onDemand, 'f', 10, 64)},
					"description": fmt.Sprintf("$%g per On Demand Linux %s Instance Hour", it.onDemand, it.name)}}}}},
		}
		b, _ := json.Marshal(doc)
		list = append(list, string(b))
	}
	s.mu.Unlock()
	start, _ := strconv.Atoi(in.NextToken)
	if start > len(list) {
		start = len(list)
	}
	list = list[start:]
	max := in.MaxResults
	if max <= 0 || max > 100 {
		max = 100
	}
	out := map[string]any{"FormatVersion": "aws_v1"}
	if len(list) > max {
		list, out["NextToken"] = list[:max], strconv.Itoa(start+max)
	}
	out["PriceList"] = list
	writeJSON(w, awsJSON11, out)
}
