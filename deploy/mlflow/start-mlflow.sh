#!/bin/sh
# The MLflow tracking server with its basic-auth app: every request needs an account, and an
# account does only what `routeforge bundle accounts` granted it (default_permission =
# NO_PERMISSIONS). MLflow reads its auth settings from an INI file that expands no environment
# variable, so this writes one (mode 600, in a private temporary folder) and starts the server:
#   MLFLOW_AUTH_DATABASE_URI        where users and grants live (deploy/compose.yaml: PostgreSQL)
#   MLFLOW_AUTH_ADMIN_PASSWORD      the admin's password; used once, when the user store is empty
#   MLFLOW_AUTH_ADMIN_USERNAME      the admin's name (default admin)
#   MLFLOW_FLASK_SERVER_SECRET_KEY  CSRF secret of the auth app; the same on every replica
# Every argument is passed on to `mlflow server` (host, port, stores).
set -eu
: "${MLFLOW_AUTH_DATABASE_URI:?set MLFLOW_AUTH_DATABASE_URI (the auth app's user store)}"
: "${MLFLOW_AUTH_ADMIN_PASSWORD:?set MLFLOW_AUTH_ADMIN_PASSWORD}"
: "${MLFLOW_FLASK_SERVER_SECRET_KEY:?set MLFLOW_FLASK_SERVER_SECRET_KEY}"
umask 077
folder=$(mktemp -d)
cat > "$folder/basic_auth.ini" <<INI
[mlflow]
default_permission = NO_PERMISSIONS
database_uri = ${MLFLOW_AUTH_DATABASE_URI}
admin_username = ${MLFLOW_AUTH_ADMIN_USERNAME:-admin}
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
INI
export MLFLOW_AUTH_CONFIG_PATH="$folder/basic_auth.ini"
exec mlflow server --app-name basic-auth "$@"
