{#- Integer keys to group by. Grouping by strings hashes every row's bytes; by integers, three
    times faster (bench/README.md, "Publication by integer keys and day sums"). Each key must
    stand for one value only: -#}

{% macro country_key(country) -%}
  {#- A country code's two bytes as one number (the parse rule lets only `^[A-Z]{2}$` in),
      and country_of_key gives the code back. -#}
  CAST(reinterpretAsUInt16(toString({{ country }})), 'UInt16')
{%- endmacro %}

{% macro country_of_key(key) -%}
  reinterpretAsString({{ key }})
{%- endmacro %}

{% macro song_key(song_id) -%}
  {#- A song id's 64-bit hash. Two ids could share one (about one chance in 40 million at a
      million songs), and their listens would add up as one song's: a model that groups by it
      maps each key back to its ids and stops when a key has two (int_listens__windowed), rather
      than publish a wrong count. -#}
  cityHash64({{ song_id }})
{%- endmacro %}
