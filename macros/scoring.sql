{#- The shelves' scoring versions (issue 29), in one place, as the tie policies are in
    ranking_policy.sql: a version names, for each metric a shelf ranks by, its score as an
    integer expression over the item's `views` and `orders` in the window (each counted once:
    sql/0017). A version's meaning never changes: a new rule gets a new name, is backfilled
    over the kept snapshots (POST /internal/rebuild) and compared with the default before
    TOPLIST_SCORING_VERSION switches to it. toplist/config.py SCORINGS names the same versions. -#}

{% macro shelf_scorings() %}
  {{ return({
    'v1': {'views': 'views', 'orders': 'orders'},
    'v2': {'views': 'views', 'orders': 'orders * 5 + views'},
  }) }}
{% endmacro %}

{% macro shelf_score(version, metric) -%}
  {%- set scorings = shelf_scorings() -%}
  {%- if version not in scorings -%}
    {{ exceptions.raise_compiler_error("unknown scoring version '" ~ version ~ "'; known: " ~ scorings.keys() | join(', ')) }}
  {%- endif -%}
  {{ scorings[version][metric] }}
{%- endmacro %}
