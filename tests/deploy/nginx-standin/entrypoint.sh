#!/bin/sh
# What the official image's 20-envsubst-on-templates.sh does: only variables set in the environment are
# replaced, so nginx's own $variables stay as they are.
set -eu
defined=$(env | cut -d= -f1 | grep -E '^[A-Za-z_][A-Za-z0-9_]*$' | sed 's/.*/${&}/' | tr '\n' ' ')
for template in /etc/nginx/templates/*.template; do
    envsubst "$defined" <"$template" >"/etc/nginx/conf.d/$(basename "$template" .template)"
done
exec nginx -g 'daemon off; error_log stderr;'
