{#- Window and as_of rules (DESIGN.md "Windows and snapshots"), in one place. -#}

{% macro chart_windows() %}
  {#- Window name -> length in seconds; none means every event before as_of. -#}
  {{ return({'1h': 3600, '24h': 86400, '7d': 604800, '30d': 2592000, 'all': none}) }}
{% endmacro %}

{% macro align_as_of(value) -%}
  {#- as_of aligned down to the bucket. `value` is a SQL expression; null means now. -#}
  {#- toplist_bucket_start is the engine's bucket rule (sql/0005), shared with the aggregates. -#}
  toplist_bucket_start(
    {% if value is none %}now64(3, 'UTC'){% else %}parseDateTime64BestEffort({{ value }}, 3, 'UTC'){% endif %}
  )
{%- endmacro %}

{% macro in_window(time_column, window_name, as_of_column) -%}
  {#- as_of - W <= t < as_of; `all` has no lower bound. Exact on bucket starts because as_of
      and every window length are whole buckets. -#}
  {%- set length = chart_windows()[window_name] -%}
  ({{ time_column }} < {{ as_of_column }}
  {%- if length is not none %} and {{ time_column }} >= {{ as_of_column }} - toIntervalSecond({{ length }}){% endif %})
{%- endmacro %}

{% macro longest_bounded_window() %}
  {#- The longest window with a lower bound, in seconds: how far back buckets are read. -#}
  {{ return(chart_windows().values() | reject('none') | max) }}
{% endmacro %}

{% macro window_share(window_name, is_total, time_column, as_of) -%}
  {#- How a row counts towards the window: 1, 0 or -1. `is_total` is true for a song's
      all-time total, false for a 10-minute bucket starting at time_column. Bounded windows
      sum their buckets (in_window). `all` is the all-time total less the buckets at or after
      as_of, so it never reads the buckets before as_of. -#}
  {%- if chart_windows()[window_name] is none -%}
  multiIf({{ is_total }}, 1, {{ time_column }} >= {{ as_of }}, -1, 0)
  {%- else -%}
  toInt64(not {{ is_total }} and {{ in_window(time_column, window_name, as_of) }})
  {%- endif -%}
{%- endmacro %}

{% macro popular_windows() %}
  {#- The marketplace shelves' windows: name -> length in seconds (as_of is on 10 seconds).
      A restaurant's public shelf widens 1d -> 7d -> 28d while it has too few orders. -#}
  {{ return({'1m': 60, '1h': 3600, '1d': 86400, '7d': 604800, '28d': 2419200}) }}
{% endmacro %}

{% macro board_as_of(step_seconds=none) -%}
  {#- The as_of of one of the other boards (var `board_as_of`, default now), aligned down to
      `step_seconds` (10 seconds for the shelves, whose rows are 10-second buckets), or to the
      millisecond without one (the live boards, which count each event as it is: an order
      counts in the first snapshot cut after it, not after the end of its second). -#}
  {%- set moment -%}
    {% if var('board_as_of') is none %}now64(3, 'UTC'){% else %}parseDateTime64BestEffort('{{ var("board_as_of") }}', 3, 'UTC'){% endif %}
  {%- endset -%}
  {%- if step_seconds is none -%}
  {{ moment }}
  {%- else -%}
  toDateTime64(toStartOfInterval({{ moment }}, toIntervalSecond({{ step_seconds }})), 3, 'UTC')
  {%- endif -%}
{%- endmacro %}
