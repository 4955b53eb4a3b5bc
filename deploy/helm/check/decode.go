package main

import (
	"errors"
	"fmt"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Object is one decoded document.
type Object struct {
	Source string
	Kind   string
	Meta   *metav1.ObjectMeta
	// Obj is a pointer to the k8s.io/api (or Prometheus Operator) type of
	// Kind.
	Obj any
}

// Name is kind/name, for messages.
func (o Object) Name() string { return o.Kind + "/" + o.Meta.Name }

// kinds maps apiVersion and kind to a new object of its Go type. A kind
// the chart may not render is refused.
var kinds = map[string]func() (any, *metav1.ObjectMeta){
	"v1/ConfigMap": func() (any, *metav1.ObjectMeta) { o := &corev1.ConfigMap{}; return o, &o.ObjectMeta },
	"v1/Secret":    func() (any, *metav1.ObjectMeta) { o := &corev1.Secret{}; return o, &o.ObjectMeta },
	"v1/Service":   func() (any, *metav1.ObjectMeta) { o := &corev1.Service{}; return o, &o.ObjectMeta },
	"v1/Pod":       func() (any, *metav1.ObjectMeta) { o := &corev1.Pod{}; return o, &o.ObjectMeta },
	"apps/v1/Deployment": func() (any, *metav1.ObjectMeta) {
		o := &appsv1.Deployment{}
		return o, &o.ObjectMeta
	},
	"apps/v1/StatefulSet": func() (any, *metav1.ObjectMeta) {
		o := &appsv1.StatefulSet{}
		return o, &o.ObjectMeta
	},
	"policy/v1/PodDisruptionBudget": func() (any, *metav1.ObjectMeta) {
		o := &policyv1.PodDisruptionBudget{}
		return o, &o.ObjectMeta
	},
	"networking.k8s.io/v1/NetworkPolicy": func() (any, *metav1.ObjectMeta) {
		o := &networkingv1.NetworkPolicy{}
		return o, &o.ObjectMeta
	},
	"monitoring.coreos.com/v1/ServiceMonitor": func() (any, *metav1.ObjectMeta) {
		o := &monitoringv1.ServiceMonitor{}
		return o, &o.ObjectMeta
	},
}

// Decode decodes one document the way the API server reads a request
// body: YAML to JSON (a duplicate key fails), then JSON into the kind's
// type, field names matched case-sensitively, an unknown or duplicate
// field failing. Then the object metadata's own rules: a DNS-1123 name,
// valid label keys and values.
func Decode(m Manifest) (Object, error) {
	js, err := yaml.YAMLToJSONStrict([]byte(m.Text))
	if err != nil {
		return Object{}, fmt.Errorf("%s: %w", m.Source, err)
	}
	var tm metav1.TypeMeta
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &tm); err != nil {
		return Object{}, fmt.Errorf("%s: %w", m.Source, err)
	}
	key := tm.APIVersion + "/" + tm.Kind
	mk, ok := kinds[key]
	if !ok {
		return Object{}, fmt.Errorf("%s: unknown apiVersion/kind %q", m.Source, key)
	}
	obj, meta := mk()
	strictErrs, err := kjson.UnmarshalStrict(js, obj)
	if err != nil {
		return Object{}, fmt.Errorf("%s: %s: %w", m.Source, key, err)
	}
	if len(strictErrs) > 0 {
		return Object{}, fmt.Errorf("%s: %s: %w", m.Source, key, errors.Join(strictErrs...))
	}
	o := Object{Source: m.Source, Kind: tm.Kind, Meta: meta, Obj: obj}
	if err := validateMeta(o); err != nil {
		return Object{}, fmt.Errorf("%s: %s: %w", m.Source, o.Name(), err)
	}
	return o, nil
}

func validateMeta(o Object) error {
	var errs []error
	if o.Meta.Name == "" {
		errs = append(errs, errors.New("metadata.name is empty"))
	}
	// Services and the rest: DNS-1035 labels for Services, DNS-1123
	// subdomains otherwise (the API server's rules).
	nameErrs := validation.IsDNS1123Subdomain(o.Meta.Name)
	if o.Kind == "Service" {
		nameErrs = validation.IsDNS1035Label(o.Meta.Name)
	}
	for _, e := range nameErrs {
		errs = append(errs, fmt.Errorf("metadata.name %q: %s", o.Meta.Name, e))
	}
	for k, v := range o.Meta.Labels {
		for _, e := range validation.IsQualifiedName(k) {
			errs = append(errs, fmt.Errorf("label key %q: %s", k, e))
		}
		for _, e := range validation.IsValidLabelValue(v) {
			errs = append(errs, fmt.Errorf("label %s value %q: %s", k, v, e))
		}
	}
	for k := range o.Meta.Annotations {
		for _, e := range validation.IsQualifiedName(strings.ToLower(k)) {
			errs = append(errs, fmt.Errorf("annotation key %q: %s", k, e))
		}
	}
	return errors.Join(errs...)
}

// DecodeAll decodes every manifest; the errors of all are returned.
func DecodeAll(ms []Manifest) ([]Object, error) {
	var objs []Object
	var errs []error
	for _, m := range ms {
		o, err := Decode(m)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		objs = append(objs, o)
	}
	return objs, errors.Join(errs...)
}
