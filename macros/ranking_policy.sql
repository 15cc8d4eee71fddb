{#- Ranking policies, by version. A version's meaning never changes: a new rule gets a new
    name. Every chart model ranks through rank_items, so the tie policy lives only here. Every
    policy cuts a board the same way, `rank <= k`; the rank function alone makes the policy. -#}

{% macro ranking_policies() %}
  {{ return(['v1', 'v1-ties']) }}
{% endmacro %}

{% macro rank_items(policy, partition_by, score, item) -%}
  {%- if policy == 'v1' -%}
    {#- v1: score descending, then item id ascending bytewise (ClickHouse compares String
        values as bytes, memcmp); every row gets its own rank, so a cut at k returns
        exactly k rows and a tie at rank k is broken by the item id. -#}
    row_number() over (partition by {{ partition_by }} order by {{ score }} desc, {{ item }} asc)
  {%- elif policy == 'v1-ties' -%}
    {#- v1-ties: the same order, but songs with equal scores share a rank (1, 2, 2, 4), so a
        cut at k keeps every song tied at rank k: it may return more than k rows. -#}
    rank() over (partition by {{ partition_by }} order by {{ score }} desc)
  {%- else -%}
    {{ exceptions.raise_compiler_error("unknown ranking policy '" ~ policy ~ "'; known: " ~ ranking_policies() | join(', ')) }}
  {%- endif -%}
{%- endmacro %}

{% macro rank_floor(score, keep_top) -%}
  {#- The lowest score that can still make a board cut at `keep_top` (an aggregate over one
      board's rows): its keep_top-th highest, or 0 when it has fewer rows. Every policy ranks
      by score descending first, so a row under the floor has keep_top rows above it under any
      policy, and a row at it (tied with the last kept) stays for the policies that share ranks.
      Ranking only the rows at or over their floor gives the same cut as ranking them all. -#}
  arrayReverseSort(groupArray({{ score }}))[{{ keep_top }}]
{%- endmacro %}
