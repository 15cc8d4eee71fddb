{#- Listens per window, scope and song at the build's as_of, as a table of sums: chart_rankings
    reads it once per policy, and as a view this aggregation would run again for every read.

    Built whole (the default, what `dbt build` does), or moved: with var `windows_from` set to
    the as_of its rows were built at, the rows it adds (publish/plan.py inserts them) move the
    sums to the new as_of. They are the difference of every row's window shares between the two
    (window_share, read only near the windows' edges: moved_between), and for each song whose
    buckets before `windows_from` changed since (late events, voids, repairs: the parts of the
    buckets written after block `windows_read_block`), its sums counted again whole less those
    it holds. The engine (SummingMergeTree, sorted by song key first) adds the rows of a key up;
    readers take the sums with FINAL. -#}
{{ config(
    materialized='table',
    engine=("ReplicatedSummingMergeTree('/clickhouse/tables/{uuid}/all', '{replica}')"
        if env_var('TOPLIST_CLICKHOUSE_CLUSTER', '') else 'SummingMergeTree()'),
    order_by='(song_key, window_name, scope)',
) }}

-- depends_on: {{ source('toplist', 'listens_by_10m') }} (read when moving: dbt parses without)

{%- set windows = chart_windows() -%}
{%- set moving = var('windows_from', none) is not none -%}

-- as_of is one scalar for the whole query (a cross join with the as_of table made every
-- window's test twice as slow); only the buckets and days some window counts are read
with (select as_of from {{ ref('int_chart__as_of') }}) as as_of,

{%- if moving %}
{{ align_as_of("'" ~ var('windows_from') ~ "'") }} as since,
{%- endif %}

-- every song counted is in the totals: a key shared there stops the build (macros/keys.sql)
(select throwIf({{ shared_song_keys(ref('stg_toplist__listen_totals')) }} > 0,
    'two song ids share one 64-bit song key (macros/keys.sql): their listens would add up as'
    || ' one song''s, so this build stops')) as stop,

{%- if moving %}

-- the songs whose buckets before `since` were written after the sums were read: each is
-- counted again whole
changed as (

    select distinct song_id
    from {{ source('toplist', 'listens_by_10m') }}
    where toUInt64(splitByChar('_', _part)[3]) > {{ var('windows_read_block') }}
        and bucket_start < since

),

-- a constant for the whole query: with no such song, nothing is read for them
(select count() > 0 from changed) as any_changed,

-- moved: the rows near the windows' edges (read by their sort key) of the songs not counted
-- again whole, and every row of those that are
buckets as (

    select *, any_changed and song_id in changed as whole
    from {{ ref('stg_toplist__listen_buckets') }}
    where ({{ moved_between('bucket', 'bucket_start', 'since', 'as_of') }} and not whole)
        or (whole and {{ buckets_counted('bucket_start', 'as_of') }})

),

days as (

    select *, any_changed and song_id in changed as whole
    from {{ ref('stg_toplist__listen_days') }}
    where ({{ moved_between('day', 'day', 'since', 'as_of') }} and not whole)
        or (whole and {{ days_counted('day', 'as_of') }})

),

totals as (

    select *, true as whole from {{ ref('stg_toplist__listen_totals') }}
    where any_changed and song_id in changed

),
{%- else %}

buckets as (

    select *, false as whole from {{ ref('stg_toplist__listen_buckets') }}
    where {{ buckets_counted('bucket_start', 'as_of') }}

),

days as (

    select *, false as whole from {{ ref('stg_toplist__listen_days') }}
    where {{ days_counted('day', 'as_of') }}

),

totals as (

    select *, false as whole from {{ ref('stg_toplist__listen_totals') }}

),
{%- endif %}

pieces as (

    select 'bucket' as piece, bucket_start as starts, country, song_id, listens, whole from buckets
    union all
    select 'day' as piece, day as starts, country, song_id, listens, whole from days
    union all
    select 'total' as piece, toDateTime(0, 'UTC') as starts, country, song_id, listens, whole from totals

),

-- each row on integer keys, with how it counts towards each window as one number: digit i
-- (base 5) is window i's share + 2. Built whole, the share at as_of (1, 0 or -1); moved, the
-- share at as_of less the share at `since` (a row counted whole: its share at as_of)
keyed as (

    select
        {{ country_key('country') }} as country_key,
        {{ song_key('song_id') }} as song_key,
        toUInt16(
            {%- for window_name in windows %}
            ({{ window_share(window_name, 'piece', 'starts', 'as_of') }}
            {%- if moving %} - if(whole, 0, {{ window_share(window_name, 'piece', 'starts', 'since') }}){% endif %} + 2) * {{ 5 ** loop.index0 }}{{ " +" if not loop.last }}
            {%- endfor %}
        ) as shares,
        song_id,
        listens
    from pieces

),

-- first the rows that count alike for a country and song: a few per song instead of one per
-- bucket
by_shares as (

    select
        country_key,
        song_key,
        shares,
        any(song_id) as song_id,
        sum(listens) as listens
    from keyed
    group by country_key, song_key, shares

),

-- then each country and global (two grouping sets: half the work of counting every row
-- twice), once per window
by_scope as (

    select
        if(grouping(country_key) = 0, {{ country_of_key('country_key') }}, 'global') as scope,
        song_key,
        any(song_id) as song_id,
        {%- for window_name in windows %}
        sum(listens * (intDiv(shares, {{ 5 ** loop.index0 }}) % 5 - 2)) as listens_{{ window_name }}{{ "," if not loop.last }}
        {%- endfor %}
    from by_shares
    group by grouping sets ((country_key, song_key), (song_key))

),

counted as (

    select
        window_name,
        scope,
        song_key,
        song_id,
        toInt64(listens) as listens
    from by_scope
    array join
        [{% for window_name in windows %}'{{ window_name }}'{{ ", " if not loop.last }}{% endfor %}] as window_name,
        [{% for window_name in windows %}listens_{{ window_name }}{{ ", " if not loop.last }}{% endfor %}] as listens
    {%- if moving %}
    where listens != 0 and stop = 0

    -- a song counted again whole replaces the sums held for it
    union all

    select window_name, scope, song_key, any(song_id) as song_id, -sum(listens) as listens
    from {{ this }}
    where any_changed and song_key in (select {{ song_key('song_id') }} from changed)
    group by window_name, scope, song_key
    {%- else %}
    -- songs with no listens in a window never appear on its board
    where listens > 0 and stop = 0
    {%- endif %}

)

select * from counted
